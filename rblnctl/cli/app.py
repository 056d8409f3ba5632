"""Root Typer app: global options -> State in ctx.obj, one add_typer()/command per group, main()."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from rblnctl import __version__
from rblnctl.cli import kubevirt, node, preflight, status, vfio
from rblnctl.cli.errors import RblnGroup, parse_duration

if TYPE_CHECKING:
    from rblnctl.kube import Kube

HELP = """Run Rebellions RBLN NPUs inside KubeVirt VMs: check readiness, switch node modes,
enable KubeVirt gates and bind NPUs to vfio-pci — each step one safe, checked command.

Global options (--kubeconfig, --context, -v, --no-color) may also follow the subcommand, as in kubectl.
Exit codes: 0 ok, 1 failed or refused, 2 bad input or kubeconfig, 3 cluster unreachable,
4 unauthorised or forbidden, 5 timed out waiting (docs/exit-codes.md)."""


class State:
    """Global options, and the cluster connection built on first use (never for --help or host commands).

    A plain class, not a dataclass: importing dataclasses costs every TAB press ~8 ms.
    """

    def __init__(self, *, kubeconfig: str | None = None, context: str | None = None, server: str | None = None,
                 request_timeout_s: float | None = 30.0, verbose: int = 0) -> None:
        self.kubeconfig = kubeconfig
        self.context = context
        self.server = server
        self.request_timeout_s = request_timeout_s
        self.verbose = verbose
        self._kube: Any = None

    def kube(self) -> "Kube":
        """Connect to the cluster (lazily imports the kubernetes package)."""
        if self._kube is None:
            from rblnctl.kube import KubeOptions, connect

            self._kube = connect(
                KubeOptions(
                    kubeconfig=self.kubeconfig,
                    context=self.context,
                    server=self.server,
                    request_timeout_s=self.request_timeout_s,
                )
            )
        return self._kube


app = typer.Typer(
    cls=RblnGroup,
    help=HELP,
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"rblnctl {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    kubeconfig: Annotated[
        str | None,
        typer.Option("--kubeconfig", help="Path to the kubeconfig file [default: $KUBECONFIG, ~/.kube/config, "
                     "in-cluster].", show_default=False),
    ] = None,
    context: Annotated[str | None, typer.Option("--context", help="Kubeconfig context to use.")] = None,
    server: Annotated[
        str | None, typer.Option("--server", hidden=True, help="API server URL without auth (tests, kubectl proxy).")
    ] = None,
    request_timeout: Annotated[
        str,
        typer.Option("--request-timeout", metavar="DURATION",
                     help="How long to wait for each API request: seconds or a duration like 30s, 1m, 1m30s; "
                     "0 waits forever (as in kubectl)."),
    ] = "30s",
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True, help="Log API requests; show tracebacks.")] = 0,
    no_color: Annotated[bool, typer.Option("--no-color", help="No colour (NO_COLOR is honoured too).")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Run Rebellions RBLN NPUs inside KubeVirt VMs."""
    if no_color:
        from rblnctl.cli.console import disable_color

        disable_color()
    if verbose:
        import logging

        logger = logging.getLogger("rblnctl")
        handler = logging.StreamHandler()  # binds the current sys.stderr
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)

        def _detach() -> None:  # in-process callers (tests, plugins) get the logger back as it was
            logger.removeHandler(handler)
            logger.setLevel(logging.NOTSET)

        ctx.call_on_close(_detach)
    ctx.obj = State(
        kubeconfig=kubeconfig,
        context=context,
        server=server,
        request_timeout_s=parse_duration(request_timeout, option="--request-timeout", zero_means_forever=True),
        verbose=verbose,
    )


preflight.register(app)
status.register(app)
app.add_typer(node.app, name="node")
app.add_typer(kubevirt.app, name="kubevirt")
app.add_typer(vfio.app, name="vfio")


def main() -> None:
    """Console-script entry point (`rblnctl`, `kubectl-rbln`, `python -m rblnctl`)."""
    import os
    import sys
    import warnings

    # A kubeconfig with insecure-skip-tls-verify makes urllib3 warn on every request (several lines
    # on stderr, breaking the one-line errors); kubectl accepts that setting silently, and so do we.
    warnings.filterwarnings("ignore", message="Unverified HTTPS request")
    from rblnctl.cli.errors import install_signal_handlers

    install_signal_handlers()
    # Invoked by kubectl as a plugin (`kubectl rbln ...` runs kubectl-rbln): say so in usage lines.
    plugin = os.path.basename(sys.argv[0]) == "kubectl-rbln"
    app(prog_name="kubectl rbln" if plugin else "rblnctl")
