"""`rblnctl version`: the client's version and commit, and the cluster's versions that matter to rblnctl."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from rblnctl.cli.options import OutputOpt, examples
from rblnctl.cli.state import state

if TYPE_CHECKING:  # the library's types, for the checker only
    from rblnctl.cli.output import View
    from rblnctl.version import ClientVersion, Component

EXAMPLES = examples(
    "rblnctl version",
    "rblnctl version --client              # no cluster needed",
    "rblnctl version -o jsonpath='{.server.operator.version}'",
)
LABELS = {"kubernetes": "Kubernetes", "kubevirt": "KubeVirt", "operator": "RBLN NPU Operator",
          "draDriver": "RBLN DRA driver"}


def version(
    ctx: typer.Context,
    client: Annotated[bool, typer.Option("--client", help="Only this client's version (no cluster).")] = False,
    output: OutputOpt = "table",
) -> None:
    """Print client and cluster versions."""
    from rblnctl.cli.output import emit
    from rblnctl.errors import AuthError, ClusterUnreachable, ConfigError
    from rblnctl.version import client_version, cluster_components

    me = client_version()
    components = None
    error: Exception | None = None
    if not client:
        try:
            components = cluster_components(state(ctx).kube())
        except (ClusterUnreachable, AuthError, ConfigError) as e:
            error = e  # the client's version is still worth printing, as kubectl version does
    emit(_view(me, components), output)
    if error is not None:
        raise error


def _view(me: ClientVersion, components: list[Component] | None) -> View:
    from rblnctl.cli.output import View
    from rblnctl.documents import VERSION, body

    doc = body(VERSION, me=me, components=components)
    client = doc["client"]
    commit = f" (commit {client['commit']})" if client["commit"] else ""
    lines = [f"Client Version: {client['version']}{commit}"]
    for name, c in (doc["server"] or {}).items():
        if c["version"]:
            shown = c["version"]
        elif (c["note"] or "").startswith("not installed"):
            shown = "<not installed>"
        else:
            shown = f"<unknown: {c['note']}>"
        lines.append(f"{LABELS.get(name, name)} Version: {shown}")
    return View(kind="Version", body=doc, preamble=lines)


def register(app: typer.Typer) -> None:
    """Mount the command on the root app."""
    app.command("version", short_help="Print client and cluster versions.", epilog=EXAMPLES)(version)
