"""Root Typer app: global options -> State (read through state(ctx)), one add_typer()/command per group, main()."""

from __future__ import annotations

from typing import Annotated

import typer

from rblnctl import __version__
from rblnctl.cli import completion
from rblnctl.cli.connect import connection_options
from rblnctl.cli.lazy import Lazy, LazyRootGroup, builder
from rblnctl.cli.state import State

HELP = """Run Rebellions RBLN NPUs inside KubeVirt VMs: check readiness, switch node modes,
enable KubeVirt gates and bind NPUs to vfio-pci — each step one safe, checked command.

Global options (connection flags, -n, -v, --no-headers, --no-color) may also follow the subcommand,
as in kubectl. Exit codes: 0 ok, 1 failed or refused, 2 bad input or kubeconfig, 3 cluster
unreachable, 4 unauthorised or forbidden, 5 timed out waiting (docs/exit-codes.md)."""


app = typer.Typer(
    cls=LazyRootGroup,
    help=HELP,
    no_args_is_help=True,
    add_completion=False,  # `rblnctl completion SHELL` prints the scripts, as `kubectl completion` does
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"rblnctl {__version__}")
        raise typer.Exit()


_CONN = "Connection (as kubectl)"


@app.callback()
def root(
    ctx: typer.Context,
    kubeconfig: Annotated[
        str | None,
        typer.Option("--kubeconfig", metavar="PATH", help="Path to the kubeconfig file [default: $KUBECONFIG, "
                     "~/.kube/config, in-cluster].", show_default=False),
    ] = None,
    context: Annotated[str | None, typer.Option("--context", metavar="NAME", help="Kubeconfig context to use.",
                                                autocompletion=completion.complete_contexts)] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", metavar="NAME",
                                                help="Kubeconfig cluster to use instead of the context's.")] = None,
    user: Annotated[str | None, typer.Option("--user", metavar="NAME",
                                             help="Kubeconfig user to use instead of the context's.")] = None,
    server: Annotated[
        str | None, typer.Option("--server", "-s", metavar="URL", help="The API server's address, instead of the "
                                 "context's (without a kubeconfig: a plain URL, e.g. kubectl proxy).")
    ] = None,
    token: Annotated[str | None, typer.Option("--token", metavar="TOKEN",
                                              help="Bearer token for the API server.")] = None,
    certificate_authority: Annotated[
        str | None, typer.Option("--certificate-authority", metavar="PATH",
                                 help="CA bundle file for the server's certificate.")
    ] = None,
    insecure_skip_tls_verify: Annotated[
        bool, typer.Option("--insecure-skip-tls-verify", help="Do not check the server's certificate (insecure).")
    ] = False,
    as_user: Annotated[str | None, typer.Option("--as", metavar="USER", help="Impersonate this user.")] = None,
    as_group: Annotated[
        list[str] | None, typer.Option("--as-group", metavar="GROUP", help="Impersonate this group (repeatable).")
    ] = None,
    request_timeout: Annotated[
        str,
        typer.Option("--request-timeout", metavar="DURATION",
                     help="How long to wait for each API request: seconds or a duration like 30s, 1m, 1m30s; "
                     "0 waits forever (as in kubectl)."),
    ] = "30s",
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", metavar="NAMESPACE", show_default=False,
                                 help="Namespace of the VMs a vm command works on [default: the kubeconfig context's, "
                                 "else default]; for kubevirt, preflight, rbac and vfio: the namespace to use instead "
                                 "of the one found (the KubeVirt CR's, the operator's).",
                                 autocompletion=completion.complete_namespaces)
    ] = None,
    all_namespaces: Annotated[
        bool, typer.Option("--all-namespaces", "-A", help="Every namespace, where a command lists namespaced objects.")
    ] = False,
    no_headers: Annotated[bool, typer.Option("--no-headers", help="Print tables without their header row.")] = False,
    verbose: Annotated[
        int, typer.Option("--verbose", "-v", count=True, help="Debug log and tracebacks on stderr; -v=N / --v=N sets "
                          "kubectl's levels: 6 logs each API request, 8 also the bodies (secrets masked).")
    ] = 0,
    level: Annotated[int, typer.Option("--v", hidden=True, min=0, help="Log level, as kubectl's --v.")] = 0,
    no_color: Annotated[bool, typer.Option("--no-color", help="No colour (NO_COLOR is honoured too).")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Run Rebellions RBLN NPUs inside KubeVirt VMs."""
    from rblnctl.cli.console import disable_color
    from rblnctl.cli.output import set_no_headers

    if no_color:
        disable_color()
    set_no_headers(no_headers)
    verbosity = max(verbose, level)
    if verbosity:
        _start_logging(ctx, verbosity)
    ctx.obj = State(
        connection=connection_options(ctx.params),
        namespace=namespace,
        all_namespaces=all_namespaces,
        verbose=verbosity,
        no_headers=no_headers,
    )


# The loggers each -v level turns on, as kubectl's levels: rblnctl's own debug lines from 1, a line
# per API request from 6, request and response bodies from 8.
REQUEST_LOG_LEVEL = 6
BODY_LOG_LEVEL = 8


def _start_logging(ctx: typer.Context, verbosity: int) -> None:
    import logging

    logger = logging.getLogger("rblnctl")
    handler = logging.StreamHandler()  # binds the current sys.stderr
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    quiet = {"rblnctl.kube.requests": REQUEST_LOG_LEVEL, "rblnctl.kube.bodies": BODY_LOG_LEVEL}
    for name, needed in quiet.items():
        logging.getLogger(name).setLevel(logging.DEBUG if verbosity >= needed else logging.INFO)

    def _detach() -> None:  # in-process callers (tests, plugins) get the loggers back as they were
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
        for name in quiet:
            logging.getLogger(name).setLevel(logging.NOTSET)

    ctx.call_on_close(_detach)


def _completion(app: typer.Typer) -> None:
    from rblnctl.cli.options import examples

    app.command("completion", short_help="Print the shell completion script.", epilog=examples(
        "source <(rblnctl completion bash)          # bash, this shell",
        "rblnctl completion bash > /etc/bash_completion.d/rblnctl",
        'rblnctl completion zsh > "${fpath[1]}/_rblnctl"',
        "rblnctl completion fish > ~/.config/fish/completions/rblnctl.fish",
        "# kubectl rbln <TAB> (kubectl >= 1.26): kubectl_complete-rbln is installed with rblnctl",
    ))(completion.completion_command)


def _group(module: str, name: str, short_help: str) -> Lazy:
    def register(app: typer.Typer) -> None:
        from importlib import import_module

        app.add_typer(import_module(f"rblnctl.cli.{module}").app, name=name, short_help=short_help)

    return Lazy(short_help, register)


def _command(module: str, short_help: str) -> Lazy:
    def register(app: typer.Typer) -> None:
        from importlib import import_module

        import_module(f"rblnctl.cli.{module}").register(app)

    return Lazy(short_help, register)


# Every subcommand, in the order --help lists them, registered lazily (rblnctl.cli.lazy): a command's module is
# imported only when that command runs or shows its help. tests/test_lazy_commands.py checks the short helps here
# against the commands' own.
LazyRootGroup.lazy = {
    "preflight": _command("preflight", "Check the cluster (or this host) is ready."),
    "status": _command("status", "Overview: policy, KubeVirt, NPU nodes."),
    "rbac": _command("rbac", "Print the RBAC rules rblnctl needs."),
    "version": _command("version", "Print client and cluster versions."),
    "completion": Lazy("Print the shell completion script.", _completion),
    "node": _group("node", "node", "NPU nodes: list, set-mode, drain, history."),
    "kubevirt": _group("kubevirt", "kubevirt", "KubeVirt gates and permitted NPUs."),
    "vm": _group("vm", "vm", "VMs and their NPUs: attach, list, diagnose."),
    "policy": _group("policy", "policy", "Operator policy: show, set-method."),
    "vfio": _group("vfio", "vfio", "Bind NPUs to vfio-pci on this host."),
}
LazyRootGroup.build = staticmethod(builder(
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None))


def kubectl_complete() -> None:
    """Console-script entry point `kubectl_complete-rbln`: kubectl's plugin completion (rblnctl.cli.completion)."""
    import typer.main

    completion.kubectl_complete(typer.main.get_command(app))


def main() -> None:
    """Console-script entry point (`rblnctl`, `kubectl-rbln`, `python -m rblnctl`)."""
    import os
    import sys
    import warnings

    # A kubeconfig with insecure-skip-tls-verify makes urllib3 warn on every request (several lines
    # on stderr, breaking the one-line errors); kubectl accepts that setting silently, and so do we.
    warnings.filterwarnings("ignore", message="Unverified HTTPS request")
    from rblnctl.cli.errors import install_signal_handlers, interrupt_exit_code, interrupted_line

    install_signal_handlers()
    # Invoked by kubectl as a plugin (`kubectl rbln ...` runs kubectl-rbln): say so in usage lines.
    plugin = os.path.basename(sys.argv[0]) == "kubectl-rbln"
    try:
        app(prog_name="kubectl rbln" if plugin else "rblnctl")
    except KeyboardInterrupt as err:  # before or after a command ran (start-up, parsing): no traceback, its code
        sys.stderr.write(interrupted_line(getattr(err, "signum", None), sys.stderr.isatty()) + "\n")
        sys.exit(interrupt_exit_code(err))
    except SystemExit as done:
        leave_now_if_threads_run(done.code)
        raise


def leave_now_if_threads_run(code: object) -> None:
    """Exit at once, without the interpreter's finalization, when threads of rblnctl's own are still running.

    A command that fails while its other reads are in flight (rblnctl.kube.parallel, watch streams, a lock's
    renewal: daemon threads, so that an error or Ctrl-C need not wait for them) would otherwise finalize the
    interpreter under threads that are inside OpenSSL without the GIL: the SSL context they use is freed under them
    and the process can die of SIGSEGV after printing its error (seen once in CI: `status` against an untrusted
    certificate exited -11 instead of 3). kubectl's process simply exits; so does this one: the atexit handlers run
    (the kubeconfig's temporary certificate files go), stdout and stderr flushed, then os._exit with the command's
    code. Only when every other live thread is a daemon: a non-daemon one (a pool's worker) is joined by the normal
    exit, which then finalizes as before. An in-process caller (tests/kernel/forkserver.py) gets no SystemExit
    back in that case; no vfio or host command starts such threads."""
    import atexit
    import os
    import sys
    import threading

    others = [t for t in threading.enumerate() if t is not threading.current_thread() and t.is_alive()]
    if not others or not all(t.daemon for t in others):
        return
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        sys.stderr.write(f"{code}\n")
        status = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status & 0xFF)
