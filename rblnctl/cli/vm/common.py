"""What several `rblnctl vm` verbs share: the group's Typer app they register on, the VM argument, the
method/resource/product options, the namespace a command works in, a device's source."""

from __future__ import annotations

import enum
from typing import Annotated

import typer

from rblnctl.cli import completion
from rblnctl.cli.state import state

app = typer.Typer(
    help="Give KubeVirt VMs their NPUs (sandbox or DRA), list them, say why a VM has none and where more fit, "
         "and start, stop or restart them.",
    no_args_is_help=True,
)


class Method(str, enum.Enum):
    """--method values."""

    sandbox = "sandbox"
    dra = "dra"


VmArg = Annotated[str, typer.Argument(help="Name of the VirtualMachine.", metavar="VM", show_default=False,
                                      autocompletion=completion.complete_vms)]
MethodOpt = Annotated[
    Method | None,
    typer.Option("--method", help="sandbox (the sandbox device plugin's resource) or dra (a ResourceClaim of "
                 "vfio-npu.rebellions.ai) [default: what the RBLNClusterPolicy enables].", case_sensitive=False,
                 show_default=False),
]
ResourceOpt = Annotated[
    str | None,
    typer.Option("--resource", metavar="NAME", help="Sandbox: the resource, e.g. rebellions.ai/RBLN-CA22_PF "
                 "[default: the only one vm-mode nodes advertise].", show_default=False),
]
ProductOpt = Annotated[
    str | None,
    typer.Option("--product", metavar="MODEL", help="Sandbox: use the resource of this product, e.g. RBLN-CA22.",
                 show_default=False),
]


def _namespace(ctx: typer.Context) -> str:
    """-n, else the kubeconfig context's namespace, else `default` (as kubectl resolves it)."""
    from rblnctl.kube import validate_namespace

    st = state(ctx)
    if st.namespace is not None:
        validate_namespace(st.namespace)  # bad input fails before connecting
    return validate_namespace(st.object_namespace())


def _source(d: dict) -> str:
    """A device document's source (rblnctl.vm.model.NpuDevice.source): its resource, or `claim/request`."""
    return d["resource"] or f"{d['claim']}/{d['request']}"
