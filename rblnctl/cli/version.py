"""`rblnctl version`: the client's version and commit, and the cluster's versions that matter to rblnctl."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from rblnctl.cli.options import OutputOpt, examples

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
            components = cluster_components(ctx.obj.kube())
        except (ClusterUnreachable, AuthError, ConfigError) as e:
            error = e  # the client's version is still worth printing, as kubectl version does
    emit(_view(me, components), output)
    if error is not None:
        raise error


def _view(me: ClientVersion, components: list[Component] | None) -> View:
    from rblnctl.cli.output import View

    def body() -> dict:
        return {"client": {"version": me.version, "commit": me.commit, "python": me.python},
                "server": None if components is None else {
                    c.name: {"version": c.version, "source": c.source, "note": c.note} for c in components}}

    commit = f" (commit {me.commit})" if me.commit else ""
    lines = [f"Client Version: {me.version}{commit}"]
    for c in components or []:
        if c.version:
            shown = c.version
        elif (c.note or "").startswith("not installed"):
            shown = "<not installed>"
        else:
            shown = f"<unknown: {c.note}>"
        lines.append(f"{LABELS.get(c.name, c.name)} Version: {shown}")
    return View(kind="Version", body=body, preamble=lines)


def register(app: typer.Typer) -> None:
    """Mount the command on the root app."""
    app.command("version", short_help="Print client and cluster versions.", epilog=EXAMPLES)(version)
