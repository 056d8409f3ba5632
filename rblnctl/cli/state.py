"""The CLI's per-invocation state (global options, the cluster connection) and `state(ctx)`, its typed accessor.

The root callback (rblnctl.cli.app) puts a State into the click context; every command reaches it through
`state(ctx)`, never through `ctx.obj` (which click leaves untyped): mypy then checks every use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import typer

    from rblnctl.kube import Kube


class State:
    """Global options, and the cluster connection built on first use (never for --help or host commands).

    A plain class, not a dataclass: importing dataclasses costs every TAB press ~8 ms.
    """

    def __init__(self, *, connection: dict | None = None, namespace: str | None = None, all_namespaces: bool = False,
                 verbose: int = 0, no_headers: bool = False) -> None:
        self.connection = dict(connection or {})  # KubeOptions fields
        self.namespace = namespace
        self.all_namespaces = all_namespaces
        self.verbose = verbose
        self.no_headers = no_headers
        self._kube: Kube | None = None

    def kube(self, *, from_cache: bool = False) -> "Kube":
        """Connect to the cluster (lazily imports the kubernetes package).

        `from_cache`: a display command, whose lists the apiserver may serve from its watch cache
        (Kube.list_from_cache); never for a command that writes on what it read.
        """
        if self._kube is None:
            from rblnctl.kube import KubeOptions, connect

            from rblnctl.cli.console import ServerWarnings

            self._kube = connect(KubeOptions(**self.connection))
            self._kube.on_warning = ServerWarnings()  # the server's Warning headers, as kubectl prints them
        if from_cache:
            self._kube.list_from_cache = True
        return self._kube

    def object_namespace(self) -> str:
        """The namespace a command's namespaced objects live in: -n, else the kubeconfig context's, else `default`.

        kubectl's order (rblnctl.kube.connection); reading the context's namespace connects.
        """
        return self.namespace or self.kube().namespace


def state(ctx: typer.Context) -> State:
    """The State of this invocation (click hands the root's obj down to every subcommand's context)."""
    obj = ctx.obj
    if not isinstance(obj, State):
        raise RuntimeError("rblnctl's root callback did not run: no State in the click context")
    return obj
