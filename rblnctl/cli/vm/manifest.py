"""`rblnctl vm manifest`: print a VirtualMachine with N NPUs, ready to apply."""

from __future__ import annotations

from typing import Annotated

import typer

from rblnctl import constants as C  # plain data: the defaults the help texts show
from rblnctl.cli.options import examples, output_option
from rblnctl.cli.output import Format, OutputSpec
from rblnctl.cli.vm.common import MethodOpt, ProductOpt, ResourceOpt, _namespace, app
from rblnctl.cli.state import state

MANIFEST_EXAMPLES = examples(
    "rblnctl vm manifest my-vm --npus 2 --ssh-key ~/.ssh/id_ed25519.pub > vm.yaml",
    "rblnctl vm manifest my-vm -n vms --npus 2 --user me | kubectl apply -f -",
    "rblnctl vm manifest my-vm -n vms --npus 2 --product RBLN-CA22  # two products",
    "rblnctl vm manifest my-vm -n vms --method dra --npus 2 | kubectl apply -f -",
    "rblnctl vm manifest my-vm -n vms --instancetype u1.xlarge --pvc my-root",
    "rblnctl vm manifest my-vm --cpu 8 --memory 32Gi --datavolume-source vms/base",
)


def _manifest_namespace(ctx: typer.Context) -> str:
    """Where `kubectl apply` will put a manifest written without -n: the context's namespace when the kubeconfig
    names one, else `default`. A manifest needs no cluster: a kubeconfig that cannot be read means `default`."""
    from rblnctl.errors import ConfigError

    try:
        return _namespace(ctx)
    except ConfigError:
        return "default"


# -- manifest -------------------------------------------------------------------------------------------------


@app.command("manifest", short_help="Print a VM manifest with N NPUs.", epilog=MANIFEST_EXAMPLES)
def manifest(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Name of the VirtualMachine to write.", metavar="NAME",
                                        show_default=False)],
    npus: Annotated[int, typer.Option("--npus", metavar="N", min=1, help="How many NPUs.")] = 1,
    method: MethodOpt = None,
    resource: ResourceOpt = None,
    product: ProductOpt = None,
    cpu: Annotated[int | None, typer.Option("--cpu", metavar="N", show_default=False,
                                            help=f"vCPUs (domain.cpu.cores) [default: {C.VM_DEFAULT_CORES}, or the "
                                            "instancetype's].")] = None,
    memory: Annotated[str | None, typer.Option(
        "--memory", metavar="SIZE", show_default=False,
        help=f"Guest memory, a quantity like 16Gi [default: {C.VM_DEFAULT_MEMORY}, or the instancetype's].")] = None,
    instancetype: Annotated[str | None, typer.Option(
        "--instancetype", metavar="[KIND/]NAME", show_default=False,
        help="A KubeVirt instancetype that sizes the VM (cluster-wide unless KIND is virtualmachineinstancetype); "
        "not with --cpu or --memory.")] = None,
    preference: Annotated[str | None, typer.Option(
        "--preference", metavar="[KIND/]NAME", show_default=False,
        help="A KubeVirt preference (cluster-wide unless KIND is virtualmachinepreference).")] = None,
    image: Annotated[str | None, typer.Option("--image", metavar="IMAGE", show_default=False,
                                              help=f"Container disk image to boot [default: {C.VM_DEFAULT_IMAGE}].")
                     ] = None,
    pvc: Annotated[str | None, typer.Option("--pvc", metavar="NAME", show_default=False,
                                            help="Boot from this PersistentVolumeClaim (the VM's namespace) instead "
                                            "of a container disk.")] = None,
    datavolume_source: Annotated[str | None, typer.Option(
        "--datavolume-source", metavar="URL|PVC", show_default=False,
        help="Boot from a new DataVolume that CDI imports from an http(s):// or docker:// URL, or clones from a PVC "
        "([NAMESPACE/]NAME).")] = None,
    disk_size: Annotated[str | None, typer.Option(
        "--disk-size", metavar="SIZE", show_default=False,
        help="Size of the --datavolume-source disk, e.g. 40Gi (required for a URL) [default: the PVC's].")] = None,
    node_product: Annotated[str | None, typer.Option(
        "--node-product", metavar="MODEL", show_default=False,
        help="Schedule only on nodes labelled rebellions.ai/npu.product=MODEL (see docs/vm.md: vm-passthrough nodes "
        "often lack it).")] = None,
    ssh_key: Annotated[
        list[str] | None,
        typer.Option("--ssh-key", metavar="FILE", show_default=False,
                     help="A public key file (e.g. ~/.ssh/id_ed25519.pub) whose keys may log in, written into the "
                     "cloud-init user data as virtctl create vm does (repeatable; a key itself works too)."),
    ] = None,
    user: Annotated[
        str | None, typer.Option("--user", metavar="NAME", show_default=False,
                                 help="The user cloud-init creates in the guest [default: the image's own, e.g. "
                                 "ubuntu].")
    ] = None,
    output: Annotated[OutputSpec, output_option((Format.yaml, Format.json), "yaml or json (a v1 List)")] = "yaml",
) -> None:
    """Print a VirtualMachine with N NPUs, ready to apply.

    Its size comes from --cpu/--memory or an --instancetype, its root disk from a container disk (--image), a PVC
    (--pvc) or a new DataVolume (--datavolume-source); --node-product keeps it on nodes of one NPU product.
    """
    import dataclasses
    import logging
    import sys

    from rblnctl.cli.output import dump
    from rblnctl.errors import InvalidInput, RblnError
    from rblnctl.cli.console import warn
    from rblnctl.vm.manifest import (
        ManifestOptions,
        advisory,
        build_manifest,
        manifest_notes,
        product_label,
        resolve_for,
    )

    if resource and product:
        raise InvalidInput("--resource and --product cannot be combined")
    chosen = method.value if method else None
    if chosen == C.METHOD_DRA and (resource or product):
        raise InvalidInput("--resource and --product pick a sandbox resource; DRA VMs claim vfio-npu.rebellions.ai")
    if product and node_product and product_label(product) != product_label(node_product):
        raise InvalidInput(f"--product {product} and --node-product {node_product} name different products")
    # Bad input fails before connecting; the cluster is read only for what was left open.
    keys = tuple(k for spec in ssh_key or [] for k in _ssh_keys(spec))
    st = state(ctx)
    opts = ManifestOptions(name=name, namespace=st.namespace, claim_namespace=_manifest_namespace(ctx), npus=npus,
                           method=chosen or C.METHOD_SANDBOX, resource=resource, image=image, user=user,
                           ssh_keys=keys, cores=cpu, memory=memory, instancetype=instancetype, preference=preference,
                           pvc=pvc, datavolume_source=datavolume_source, disk_size=disk_size,
                           node_product=node_product)
    found = None
    if chosen is None or (chosen == C.METHOD_SANDBOX and not resource):
        found = resolve_for(st.kube(), method=chosen, resource=resource, product=product, npus=npus,
                            node_product=node_product)
    else:
        # Everything was given: the cluster is read only for what would stop the VM there (gates, DeviceClass,
        # capacity); a manifest written away from any cluster is still written.
        try:
            found = resolve_for(advisory(st.kube()), method=chosen, resource=resource, product=product, npus=npus,
                                node_product=node_product)
        except RblnError as e:
            logging.getLogger(__name__).debug("vm manifest: the cluster could not be read for its warnings: %s", e)
    if found is not None:
        opts = dataclasses.replace(opts, method=found.method, resource=found.resource, device_class=found.device_class)
        from rblnctl.cli.rerun import remedy_text
        from rblnctl.remedy import Remedy

        for w in found.warnings:  # stderr: the manifest on stdout stays a List kubectl applies as is
            warn(remedy_text(ctx, w) if isinstance(w, Remedy) else w)
    objects = build_manifest(opts)
    for note in manifest_notes(opts, objects, refused=None if found is None else found.refused):
        warn(note)
    if output.format == Format.json:
        sys.stdout.write(dump({"apiVersion": "v1", "kind": "List", "items": objects}, Format.json))
    else:
        sys.stdout.write("---\n".join(dump(o, Format.yaml, literal_blocks=True) for o in objects))


def _ssh_keys(spec: str) -> list[str]:
    """--ssh-key: a file of public keys, or (as virtctl's --ssh-key) one key itself."""
    from pathlib import Path

    from rblnctl.errors import InvalidInput
    from rblnctl.vm.manifest import check_ssh_key, ssh_keys_in

    path = Path(spec).expanduser()
    if path.is_file():
        try:
            return ssh_keys_in(path.read_text(), source=spec)
        except (OSError, UnicodeDecodeError) as e:
            raise InvalidInput(f"--ssh-key {spec}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    if " " in spec.strip():
        return [check_ssh_key(spec)]
    if path.exists():  # a directory (~/.ssh), /dev/null, a socket
        raise InvalidInput(f"--ssh-key {spec}: not a regular file (give a public key file, e.g. ~/.ssh/id_ed25519.pub)")
    raise InvalidInput(f"--ssh-key {spec}: no such file (give a public key file, e.g. ~/.ssh/id_ed25519.pub)")
