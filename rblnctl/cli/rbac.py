"""`rblnctl rbac`: the ClusterRole (and Role) with exactly the rules rblnctl's commands use."""

from __future__ import annotations

from typing import Annotated

import typer

from rblnctl.cli.options import examples, not_repeated
from rblnctl.cli.state import state

EXAMPLES = examples(
    "rblnctl rbac --role read | kubectl apply -f -",
    "rblnctl rbac -n rbln-system | kubectl apply -f -     # operate: read + set-mode, drain, edits",
    "# then bind the ClusterRole (and the Role) to an account:",
    "kubectl create clusterrolebinding me --clusterrole=rblnctl-operate --user=me",
)


def rbac(
    ctx: typer.Context,
    role: Annotated[str, typer.Option("--role", metavar="ROLE", autocompletion=lambda: ["read", "operate"],
                                      help="read: the commands that only read; operate: every command.")] = "operate",
    output: Annotated[str, not_repeated(typer.Option(
        "--output", "-o", metavar="FORMAT", autocompletion=lambda: ["yaml", "json"],
        help="yaml (documents for kubectl apply -f -) or json (a v1 List)."))] = "yaml",
) -> None:
    """Print the RBAC rules rblnctl needs, for a least-privilege account.

    The Role (for the per-node locks, Leases) goes in the operator's namespace: -n, default rbln-system.
    """
    import json
    import sys

    import yaml

    from rblnctl import constants as C
    from rblnctl.errors import InvalidInput
    from rblnctl.rbac import commands_of, rbac_objects

    fmt = output.lstrip("=").lower()
    if fmt not in ("yaml", "json"):
        raise InvalidInput(f"rbac prints Kubernetes objects: -o yaml or -o json, not {output!r}")
    namespace = state(ctx).namespace or C.OPERATOR_NAMESPACE
    objects = rbac_objects(role, namespace)
    if fmt == "json":
        sys.stdout.write(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2) + "\n")
        return
    name = objects[0]["metadata"]["name"]
    head = [f"# rblnctl {role}: {', '.join(commands_of(role))}",
            "# Bind them to the account that runs rblnctl, e.g.:",
            f"#   kubectl create clusterrolebinding {name} --clusterrole={name} --serviceaccount=NAMESPACE:NAME"]
    if len(objects) > 1:
        head.append(f"#   kubectl -n {namespace} create rolebinding {name} --role={name} "
                    "--serviceaccount=NAMESPACE:NAME")
    sys.stdout.write("\n".join(head) + "\n" + yaml.safe_dump_all(objects, sort_keys=False, explicit_start=True))


def register(app: typer.Typer) -> None:
    """Mount the command on the root app."""
    app.command("rbac", short_help="Print the RBAC rules rblnctl needs.", epilog=EXAMPLES)(rbac)
