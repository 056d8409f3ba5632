"""Shell completion: `rblnctl completion bash|zsh|fish`, the completers of dynamic values, `kubectl rbln <TAB>`.

Completion requests run the CLI with `_RBLNCTL_COMPLETE=complete_<shell>` (typer's instruction names),
so they resolve the same command tree, global-option hoisting included. Values come from:

- the command tree itself (subcommands, options, enum choices such as modes and methods);
- the kubeconfig (contexts), the host's sysfs (BDFs), the KubeVirt gate registry (gates);
- the cluster (NPU node names, namespaces, VM names), through the connection flags already on the
  line, with the request timeout capped at COMPLETION_TIMEOUT_S: a TAB either answers in time or
  silently offers nothing, never an error or a traceback.

bash gets its own script (typer's falls back to file names whenever a value list is empty, so
`node set-mode vm <TAB>` offered files): only options that take a path complete paths.
`kubectl_complete-rbln` answers kubectl's plugin completion (kubectl >= 1.26) in cobra's
`__complete` format: one value per line, then `:<directive>`.
"""

from __future__ import annotations

from rblnctl.errors import one_line

import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:  # for the checker only: completion imports nothing it does not run
    from typer._click import Command, Context
    from typer._click.shell_completion import CompletionItem, ShellComplete

    from rblnctl.cli.output import Format
    from rblnctl.kube import Kube

COMPLETE_VAR = "_RBLNCTL_COMPLETE"
COMPLETION_TIMEOUT_S = 3.0
# cobra's ShellCompDirective values (spf13/cobra · completions.go)
COBRA_DEFAULT = 0
COBRA_NO_FILE_COMP = 4
COBRA_FILTER_DIRS = 16

BASH_SCRIPT = """\
%(complete_func)s() {
    local IFS=$'\\n'
    local response line
    response=$(env COMP_WORDS="${COMP_WORDS[*]}" COMP_CWORD=$COMP_CWORD \\
        %(complete_var)s=complete_bash "$1" 2>/dev/null)
    COMPREPLY=()
    for line in $response; do
        case "$line" in
            file,*) compopt -o default; COMPREPLY=(); return 0 ;;
            dir,*) compopt -o dirnames; COMPREPLY=(); return 0 ;;
            plain,*) COMPREPLY+=("${line#plain,}") ;;
        esac
    done
    return 0
}

complete -o nosort -F %(complete_func)s %(prog_name)s
"""


def completions(comp: ShellComplete, args: list[str], incomplete: str) -> list[CompletionItem]:
    """What to offer for the word being typed; a path option gets a `file` or `dir` item (its metavar says which).

    typer's path type offers nothing, leaving it to a shell fallback that would then also offer file
    names where a node or a mode belongs.
    """
    from typer._click.shell_completion import CompletionItem, _resolve_context, _resolve_incomplete
    from typer.models import TyperPath

    ctx = _resolve_context(comp.cli, comp.ctx_args, comp.prog_name, args)
    obj, incomplete = _resolve_incomplete(ctx, args, incomplete)
    metavar = getattr(obj, "metavar", None)
    if metavar == "DIR":
        return [CompletionItem(incomplete, type="dir")]
    if metavar in ("PATH", "FILE") or isinstance(getattr(obj, "type", None), TyperPath):
        return [CompletionItem(incomplete, type="file")]
    return obj.shell_complete(ctx, incomplete)


def _classes() -> dict[str, type[ShellComplete]]:
    """The completion classes, built on first use (completion never runs for ordinary commands)."""
    from typer._click.shell_completion import split_arg_string
    from typer._completion_classes import FishComplete, ZshComplete
    from typer._completion_classes import BashComplete as TyperBash

    class BashComplete(TyperBash):
        """typer's bash completion, but with click's `type,value` lines so paths complete only where wanted."""

        source_template = BASH_SCRIPT

        def get_completions(self, args: list[str], incomplete: str) -> list[CompletionItem]:
            return completions(self, args, incomplete)

        def source_vars(self) -> dict[str, Any]:
            return {"complete_func": self.func_name, "complete_var": self.complete_var, "prog_name": self.prog_name}

        def get_completion_args(self) -> tuple[list[str], str]:
            words = split_arg_string(os.environ.get("COMP_WORDS", ""))
            cword = int(os.environ.get("COMP_CWORD", "0") or 0)
            return words[1:cword], words[cword] if cword < len(words) else ""

        def format_completion(self, item: CompletionItem) -> str:
            return f"{item.type},{item.value}"

        def source(self) -> str:  # typer's checks bash's version by running bash; the script needs 4.4 (nosort)
            return self.source_template % self.source_vars()

    return {"bash": BashComplete, "zsh": ZshComplete, "fish": FishComplete}


def register() -> None:
    """Install rblnctl's completion classes (after typer's own, which they replace for bash)."""
    from typer._click.shell_completion import add_completion_class

    for name, cls in _classes().items():
        add_completion_class(cls, name)


def script(shell: str, command: Command, prog_name: str = "rblnctl") -> str:
    """The completion script for a shell, as `_RBLNCTL_COMPLETE=source_<shell> rblnctl` prints it.

    `command` is the root click command (the caller's: this module never imports the app).
    """
    cls = _classes()[shell]
    return cls(command, {}, prog_name, COMPLETE_VAR).source()


# -- completers (typer `autocompletion=` callbacks: they get the context and the word being typed) ------


def _root_params(ctx: Context) -> dict:
    return dict(ctx.find_root().params or {})


def _kube(ctx: Context) -> Kube:
    """A connection from the flags already typed, with a short timeout and no retries."""
    from rblnctl.cli.connect import connection_options
    from rblnctl.kube import KubeOptions, connect

    params = _root_params(ctx)
    options = connection_options(params)
    limit = options.get("request_timeout_s")
    options["request_timeout_s"] = COMPLETION_TIMEOUT_S if not limit else min(limit, COMPLETION_TIMEOUT_S)
    kube = connect(KubeOptions(**options))
    kube.read_retries = 0
    return kube


def _quietly(produce: Callable[[], Iterable[str]]) -> list[str]:
    """Whatever a completer finds; nothing at all when it fails (no cluster, no permission, a timeout)."""
    from rblnctl.errors import RblnError

    try:
        return list(produce())
    except (RblnError, OSError, ValueError, KeyError, TypeError):
        return []


def _starting(values: Iterable[str], incomplete: str) -> list[str]:
    return sorted(v for v in dict.fromkeys(values) if v.startswith(incomplete))


def complete_npu_nodes(ctx: typer.Context, incomplete: str) -> list[str]:
    """Names of NPU nodes (the ones NFD or the operator labelled), from the cluster."""

    def names() -> list[str]:
        from rblnctl.operator.nodes import list_npu_node_objects

        typed = set(ctx.params.get("args") or ctx.params.get("nodes") or [])
        nodes = list_npu_node_objects(_kube(ctx))
        return [n["metadata"]["name"] for n in nodes if n["metadata"]["name"] not in typed]

    return _starting(_quietly(names), incomplete)


def complete_set_mode_args(ctx: typer.Context, incomplete: str) -> list[str]:
    """`node set-mode MODE NODE...`: the modes first, then NPU node names."""
    from rblnctl import constants as C

    typed = ctx.params.get("args") or []
    if not typed:
        return _starting(["vm", "container", C.MODE_VM], incomplete)
    return complete_npu_nodes(ctx, incomplete)


def complete_namespaces(ctx: typer.Context, incomplete: str) -> list[str]:
    """Namespaces, from the cluster."""

    def names() -> list[str]:
        from rblnctl.kube import NAMESPACES

        return [n["metadata"]["name"] for n in _kube(ctx).list(NAMESPACES)]

    return _starting(_quietly(names), incomplete)


def complete_vms(ctx: typer.Context, incomplete: str) -> list[str]:
    """VirtualMachine names in the namespace -n names (else the context's, else default), from the cluster."""

    def names() -> list[str]:
        from rblnctl.kube import VMS

        kube = _kube(ctx)
        namespace = _root_params(ctx).get("namespace") or kube.namespace
        return [v["metadata"]["name"] for v in kube.list(VMS, namespace=namespace)]

    return _starting(_quietly(names), incomplete)


def complete_contexts(ctx: typer.Context, incomplete: str) -> list[str]:
    """Context names from the kubeconfig (--kubeconfig, $KUBECONFIG or ~/.kube/config); no cluster needed."""

    def names() -> list[str]:
        from pathlib import Path

        import yaml

        from rblnctl.kube import resolve_kubeconfig

        source = resolve_kubeconfig(_root_params(ctx).get("kubeconfig"))
        out: list[str] = []
        for path in (source or "").split(os.pathsep):
            try:
                doc = yaml.safe_load(Path(path).expanduser().read_text()) if path else None
            except yaml.YAMLError:
                continue
            contexts = doc.get("contexts") if isinstance(doc, dict) else None
            out += [c["name"] for c in contexts or [] if isinstance(c, dict) and isinstance(c.get("name"), str)]
        return out

    return _starting(_quietly(names), incomplete)


def complete_gates(ctx: typer.Context, incomplete: str) -> list[str]:
    """KubeVirt feature gates rblnctl knows (its registry), minus the ones already on the line."""
    from rblnctl import constants as C

    typed = set(ctx.params.get("gates") or [])
    return _starting([g for g in C.KUBEVIRT_GATES if g not in typed], incomplete)


def complete_bdfs(ctx: typer.Context, incomplete: str) -> list[str]:
    """PCI addresses of the RBLN NPUs on this host (or under --root), minus the ones already on the line."""

    def bdfs() -> list[str]:
        from pathlib import Path

        from rblnctl import constants as C
        from rblnctl.host import pci
        from rblnctl.host.root import HostRoot

        root = HostRoot.of(Path(ctx.params.get("root") or C.HOST_ROOT))
        typed = set(ctx.params.get("bdfs") or [])
        # vendor and class only: a TAB never waits on a device lock (pci.npu_bdfs)
        return [b for b in pci.npu_bdfs(root.sys) if b not in typed]

    return _starting(_quietly(bdfs), incomplete)


def complete_output(ctx: typer.Context, incomplete: str, allowed: Sequence[Format] | None = None) -> list[str]:
    """-o values: the formats the command prints (`allowed`; the common ones by default)."""
    from rblnctl.cli.output import COMMON_FORMATS, Format

    formats = COMMON_FORMATS if allowed is None else allowed
    return _starting([f"{f.value}=" if f in (Format.jsonpath, Format.custom_columns) else f.value
                      for f in formats], incomplete)


# -- kubectl plugin completion ------------------------------------------------------------------------


def kubectl_complete(command: Command) -> None:
    """`kubectl_complete-rbln WORD...`: what kubectl >= 1.26 runs for `kubectl rbln <TAB>` (cobra's format).

    `command` is the root click command (rblnctl.cli.app.kubectl_complete passes it).
    """
    from typer._completion_classes import BashComplete

    register()
    words = sys.argv[1:]
    args, incomplete = (words[:-1], words[-1]) if words else ([], "")
    comp = BashComplete(command, {}, "kubectl rbln", COMPLETE_VAR)
    directive = COBRA_NO_FILE_COMP
    lines = []
    for item in completions(comp, args, incomplete):
        if item.type == "file":
            directive = COBRA_DEFAULT
        elif item.type == "dir":
            directive = COBRA_FILTER_DIRS
        else:
            lines.append(item.value + (f"\t{one_line(item.help)}" if item.help else ""))
    sys.stdout.write("".join(f"{line}\n" for line in lines) + f":{directive}\n")
    sys.stdout.flush()


# -- the command ----------------------------------------------------------------------------------------

SHELLS = ("bash", "zsh", "fish")
def completion_command(
    ctx: typer.Context,
    shell: str = typer.Argument(..., metavar="SHELL", help="bash, zsh or fish.", autocompletion=lambda: SHELLS),
) -> None:
    """Print the shell completion script."""
    from rblnctl.errors import InvalidInput

    if shell not in SHELLS:
        raise InvalidInput(f"no completion for shell {shell!r}: use one of {', '.join(SHELLS)}")
    sys.stdout.write(script(shell, ctx.find_root().command).rstrip("\n") + "\n")
