"""`rblnctl vm attach | detach | manifest | list | diagnose | fit | start | stop | restart`: give KubeVirt VMs their
NPUs, say why one has none and where more would fit, and run them."""

from __future__ import annotations

import enum
from typing import Annotated, Any

import typer

from rblnctl import constants as C  # plain data: the defaults the help texts show
from rblnctl.cli import completion
from rblnctl.cli.console import Progress
from rblnctl.cli.options import (
    Mutating,
    OptionGroup,
    OutputOpt,
    WatchOpt,
    examples,
    grouped,
    output_option,
    sort_by_option,
    timeout_s,
)
from rblnctl.cli.output import Cell, Column, Format, joined
from rblnctl.cli.rerun import spell
from rblnctl.documents import restart_marker

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
RestartOpt = Annotated[
    bool, typer.Option("--restart", help="Change a running VM too: stop it, change it, start it, wait until Ready "
                       "(asks first unless --yes).")
]
NextRestartOpt = Annotated[
    bool, typer.Option("--next-restart", help="Change a running VM's spec only and leave it running: the change "
                       "applies when it next restarts (`vm restart`); KubeVirt marks it RestartRequired until then. "
                       "Not with --restart.")
]
TimeoutOpt = Annotated[
    str, typer.Option("--timeout", metavar="DURATION", help="With --restart: how long to wait for the VM to stop and "
                      "to be Ready again (seconds or 90s, 5m).")
]

ATTACH_EXAMPLES = examples(
    "rblnctl vm attach my-vm -n vms                  # 1 NPU; method and resource from the cluster",
    "rblnctl vm attach my-vm -n vms --npus 2 --product RBLN-CA22",
    "rblnctl vm attach my-vm -n vms --method dra --convert --restart",
    "rblnctl vm attach my-vm -n vms --npus 4 --next-restart   # running: applies at its next restart",
    "rblnctl vm attach my-vm -n vms --npus 4 --dry-run=server",
)
DETACH_EXAMPLES = examples(
    "rblnctl vm detach my-vm -n vms",
    "rblnctl vm detach my-vm -n vms --device npu1 --restart",
    "rblnctl vm detach my-vm -n vms --next-restart",
)
MANIFEST_EXAMPLES = examples(
    "rblnctl vm manifest my-vm -n vms --npus 2 --ssh-key ~/.ssh/id_ed25519.pub --user me | kubectl apply -f -",
    "rblnctl vm manifest my-vm -n vms --npus 2 --resource rebellions.ai/RBLN-CA22_PF > my-vm.yaml",
    "rblnctl vm manifest my-vm -n vms --method dra --npus 2 | kubectl apply -f -",
    "rblnctl vm manifest my-vm -n vms --instancetype u1.xlarge --preference ubuntu --pvc my-root",
    "rblnctl vm manifest my-vm -n vms --cpu 8 --memory 32Gi --datavolume-source https://example.com/jammy.img "
    "--disk-size 40Gi",
)
LIST_EXAMPLES = examples(
    "rblnctl vm list -A",
    "rblnctl vm list -n vms -o wide                  # every hostDevices entry",
    "rblnctl vm list -A --watch                      # then every change, until Ctrl-C",
    "rblnctl vm list -A --sort-by=.node -o custom-columns=VM:.name,NODE:.node,NPUS:.npus",
    "rblnctl vm list -A -o jsonpath='{.items[?(@.node==\"n1\")].name}'",
)
FIT_EXAMPLES = examples(
    "rblnctl vm fit --npus 2                          # how many 2-NPU VMs fit now, and where",
    "rblnctl vm fit --npus 2 --count 4                # exit 1 unless four fit",
    "rblnctl vm fit --npus 4 --product RBLN-CA22 -o wide",
    "rblnctl vm fit --npus 1 --method dra -o json | jq '.nodes[] | select(.fits > 0) | .name'",
)
START_EXAMPLES = examples(
    "rblnctl vm start my-vm -n vms                   # ask virt-api; a running VM: nothing to do",
    "rblnctl vm start my-vm -n vms --wait            # until Ready with its NPUs attached (5m at most)",
    "rblnctl vm start my-vm -n vms --wait --timeout 10m -o json",
)
STOP_EXAMPLES = examples(
    "rblnctl vm stop my-vm -n vms --yes              # a stopped VM: nothing to do, exit 0",
    "rblnctl vm stop my-vm -n vms --yes --wait       # until its VMI and virt-launcher are gone",
    "rblnctl vm stop my-vm -n vms --dry-run          # what would be asked; nothing is sent",
)
RESTART_EXAMPLES = examples(
    "rblnctl vm restart my-vm -n vms --yes --wait    # a new VMI, Ready with its NPUs attached",
    "rblnctl vm restart my-vm -n vms --dry-run=server",
)
DIAGNOSE_EXAMPLES = examples(
    "rblnctl vm diagnose my-vm -n vms",
    "rblnctl vm diagnose my-vm -n vms -o json | jq '.links[] | select(.status==\"FAIL\")'",
)


def _namespace(ctx: typer.Context) -> str:
    """-n, else the kubeconfig context's namespace, else `default` (as kubectl resolves it)."""
    from rblnctl.kube import validate_namespace

    if ctx.obj.namespace is not None:
        validate_namespace(ctx.obj.namespace)  # bad input fails before connecting
    return validate_namespace(ctx.obj.object_namespace())


def _manifest_namespace(ctx: typer.Context) -> str:
    """Where `kubectl apply` will put a manifest written without -n: the context's namespace when the kubeconfig
    names one, else `default`. A manifest needs no cluster: a kubeconfig that cannot be read means `default`."""
    from rblnctl.errors import ConfigError

    try:
        return _namespace(ctx)
    except ConfigError:
        return "default"


def _restart_now(ctx: Any, ref: Any) -> str:
    """`vm restart NAME -n NS --wait` as this user types it (their program name and connection flags)."""
    from rblnctl.cli.rerun import render
    from rblnctl.vm.pending import restart_command

    return render(ctx, restart_command(ref))


def _phrased(plan: Any, ctx: Any) -> Any:
    """The plan with each blocker's remedy phrased into its message (blockers the CLI prints)."""
    import dataclasses

    from rblnctl.cli.rerun import remedy_text
    from rblnctl.plan import Blocker

    blockers = []
    for b in plan.blockers:
        remedy = getattr(b, "remedy", None)
        text = f"{b.message}; {remedy_text(ctx, remedy)}" if remedy is not None else b.message
        if b.override == "restart" and hasattr(plan, "next_restart"):  # vm attach|detach offer both
            text += "; or pass --next-restart to change its spec only, for its next restart"
        blockers.append(Blocker(text, override=b.override))
    return dataclasses.replace(plan, blockers=blockers)


# -- documents and views ----------------------------------------------------------------------------------


def _change_view(plan: Any, result: Any = None, *, restart_now: str = "") -> Any:
    """A VM NPU change in every format (kind VmNpuChange)."""
    import json

    from rblnctl.cli.output import Table, View
    from rblnctl.documents import VM_NPU_CHANGE, body

    doc = body(VM_NPU_CHANGE, spell, plan=plan, result=result)
    p = doc["plan"]
    before = {d["name"]: d for d in p["devicesBefore"]}
    t = Table("DEVICE", "METHOD", "SOURCE", "CHANGE")
    for d in p["devicesAfter"]:
        name = d["name"]
        replaced = name in p["added"] and name in p["removed"]
        t.add_row(name, d["method"], _source(d), "changed" if replaced or (name not in p["added"] and before.get(
            name) != d) else "added" if name in p["added"] else "kept")
    for name in p["removed"]:
        d = before.get(name)
        if d is not None and name not in p["added"]:
            t.add_row(name, d["method"], _source(d), "removed")
    what = f"{plan.method}" + (f", {plan.resource}" if plan.resource and plan.method == "sandbox" else "") + \
        (f", {plan.template}" if plan.template else "")
    # Where the VM is now: the plan's node until the run restarted it (a new VMI, maybe elsewhere) or left it stopped.
    where = (f"; running on {plan.node}" if plan.running and plan.node else "; running" if plan.running else "")
    if result is not None and (result.not_restarted or result.left_stopped):
        where = "; stopped"
    elif result is not None and result.restarted:
        where = "; restarted"
    head = [f"VirtualMachine {plan.vm}: {plan.npus_before} -> {plan.npus_after} NPU(s)"
            + (f" ({what})" if plan.method else "") + where]
    tail: list[str] = []
    if plan.template_create:
        tail.append(f"ResourceClaimTemplate {plan.vm.namespace}/{plan.template_create['metadata']['name']}: "
                    "create (rblnctl's, shared by the namespace's VMs with as many NPUs)")
    tail += [f"ResourceClaimTemplate {plan.vm.namespace}/{n}: delete (no other VM uses it)"
             for n in (result.templates_deleted if result is not None else plan.templates_delete)]
    tail += list(result.templates_kept if result is not None else plan.templates_kept)
    if plan.start:
        tail.append("start: an earlier rblnctl run stopped this VM and could not start it again; it is started now")
    if result is not None and result.left_stopped:
        tail.append(f"left stopped: rblnctl could not start the VM again; start it with `{result.start_command}`")
    if result is not None and result.not_restarted:
        tail.append(f"not restarted: {result.not_restarted}")
    if plan.next_restart:
        tail.append(f"next restart: the VM keeps running with {plan.running_npus} NPU(s); the change applies when it "
                    f"restarts (KubeVirt marks it RestartRequired): `{restart_now}`")
    if plan.restart and not (result is not None and result.not_restarted):
        tail.append("restart: stop the VM, change it, start it, wait until Ready"
                    + ("" if result is None else f" (ready: {'yes' if result.ready else 'no'})" if result.restarted
                       else ""))
    if result is None and plan.patch and not plan.noop:
        tail.append(f"patch (application/json-patch+json): {json.dumps(plan.patch, separators=(',', ':'))}")
    others = [str(d.get("name")) for d in plan.host_devices_after if d.get("name") not in
              {x.name for x in plan.devices_after}]
    notes = [f"other host devices kept: {', '.join(others)}"] if others else []
    return View(kind="VmNpuChange", body=doc, preamble=head,
                tables=[t] if t.rows else [], epilogue=tail, notes=notes,
                names=[f"virtualmachine.kubevirt.io/{plan.vm.name}"])


def _run_change(ctx: typer.Context, planner: Any, plan: Any, *, how: str | None, yes: bool, output: Any,
                progress: Progress, verb: str) -> None:
    from rblnctl.cli.console import warn
    from rblnctl.cli.flow import Mutation, run
    from rblnctl.cli.rerun import command_line

    ref = plan.vm
    restart_now = _restart_now(ctx, ref)
    shown = _phrased(plan, ctx)

    def interrupted() -> None:  # what the library's clean-up left the VM as, in its words (rblnctl.vm.attach apply)
        for line in planner.recovery:
            warn(line)
        done = planner.interrupted
        if planner.left_stopped:
            warn(f"`{command_line(ctx)}` (the same command) starts VM {ref}: it carries rblnctl's mark")
        elif done is not None and not done.changed:  # the job is not done: the same command does it
            warn(f"`{command_line(ctx)}` (the same command) changes the NPUs of VM {ref}")

    def done(result: Any) -> str:
        text = f"VM {ref}: {result.plan.npus_before} -> {result.plan.npus_after} NPU(s)"
        if result.not_restarted:
            return f"{text}; not restarted: {result.not_restarted}"
        if result.plan.next_restart:
            return (f"{text} at its next restart; it runs with {result.plan.running_npus} until then "
                    f"(`{restart_now}` restarts it now)")
        return text + (", restarted and Ready" if result.ready else "")

    run(Mutation(
        plan=shown, apply=lambda _: planner.apply(plan), refusal=f"refusing to {verb} NPUs of VM {ref}",
        question=f"Restart VM {ref} to change its NPUs (it stops, then starts again)?", disruptive=plan.restart,
        dry_run=how, yes=yes, output=output, plan_view=lambda p: _change_view(p, restart_now=restart_now),
        result_view=lambda r: _change_view(r.plan, r, restart_now=restart_now),
        noop_message=f"VM {ref} already has {plan.npus_after} NPU(s) as asked; nothing to do",
        done_message=done, on_interrupt=interrupted, interrupted_result=lambda: planner.interrupted,
    ))


# -- attach / detach ---------------------------------------------------------------------------------------


def _restart_flags(restart: bool, next_restart: bool) -> None:
    """--restart and --next-restart exclude each other (bad input, before connecting)."""
    from rblnctl.errors import InvalidInput

    if restart and next_restart:
        raise InvalidInput("--restart and --next-restart cannot be combined: restart the VM now, or change its spec "
                           "for its next restart")


@app.command("attach", short_help="Give a VM N NPUs (sandbox or DRA).", epilog=ATTACH_EXAMPLES)
@grouped
def attach(
    ctx: typer.Context,
    vm: VmArg,
    npus: Annotated[
        int | None,
        typer.Option("--npus", metavar="N", min=0, help="How many NPUs the VM should have (a re-run with another N "
                     "adds or removes the difference; 0 takes every NPU, as `vm detach`) [default: as many as it has, "
                     "at least 1].", show_default=False),
    ] = None,
    resource: ResourceOpt = None,
    product: ProductOpt = None,
    method: MethodOpt = None,
    convert: Annotated[
        bool, typer.Option("--convert", help="Rewrite the NPUs the VM gets through the other method.")
    ] = False,
    restart: RestartOpt = False,
    next_restart: NextRestartOpt = False,
    timeout: TimeoutOpt = "5m",
    mutation: Mutating = Mutating.options(),
    output: OutputOpt = "table",
) -> None:
    """Give a VirtualMachine N NPUs (sandbox or DRA)."""
    from rblnctl.kube import validate_name
    from rblnctl.vm.attach import AttachOptions, AttachPlanner

    validate_name(vm, kind="VirtualMachine")  # bad input fails before connecting
    _restart_flags(restart, next_restart)
    namespace = _namespace(ctx)
    options = AttachOptions(npus=npus, method=method.value if method else None, resource=resource, product=product,
                            convert=convert, restart=restart, next_restart=next_restart,
                            server_dry_run=mutation.server,
                            ready_timeout_s=timeout_s(timeout))
    progress = Progress(server_dry_run=mutation.server, retry_suffix=False)
    planner = AttachPlanner(kube=ctx.obj.kube(), options=options, events=progress.vm_events())
    plan = planner.plan(vm, namespace)
    _run_change(ctx, planner, plan, how=mutation.how, yes=mutation.yes, output=output, progress=progress,
                verb="change the")


@app.command("detach", short_help="Take NPUs from a VM.", epilog=DETACH_EXAMPLES)
@grouped
def detach(
    ctx: typer.Context,
    vm: VmArg,
    all_npus: Annotated[bool, typer.Option("--all", help="Take every NPU (the default).")] = False,
    device: Annotated[
        str | None, typer.Option("--device", metavar="NAME", help="Take only this host device, e.g. npu1.",
                                 show_default=False)
    ] = None,
    restart: RestartOpt = False,
    next_restart: NextRestartOpt = False,
    timeout: TimeoutOpt = "5m",
    mutation: Mutating = Mutating.options(),
    output: OutputOpt = "table",
) -> None:
    """Take NPUs from a VirtualMachine (all, or one device)."""
    from rblnctl.errors import InvalidInput
    from rblnctl.kube import validate_name
    from rblnctl.vm.attach import DetachOptions, DetachPlanner

    validate_name(vm, kind="VirtualMachine")
    if all_npus and device:
        raise InvalidInput("--all and --device cannot be combined: take every NPU, or one device")
    _restart_flags(restart, next_restart)
    namespace = _namespace(ctx)
    options = DetachOptions(device=device, restart=restart, next_restart=next_restart,
                            server_dry_run=mutation.server, ready_timeout_s=timeout_s(timeout))
    progress = Progress(server_dry_run=mutation.server, retry_suffix=False)
    planner = DetachPlanner(kube=ctx.obj.kube(), detach=options, events=progress.vm_events())
    plan = planner.plan(vm, namespace)
    _run_change(ctx, planner, plan, how=mutation.how, yes=mutation.yes, output=output, progress=progress,
                verb="take the")


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
    output: Annotated[Any, output_option((Format.yaml, Format.json), "yaml or json (a v1 List)")] = "yaml",
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
    opts = ManifestOptions(name=name, namespace=ctx.obj.namespace, claim_namespace=_manifest_namespace(ctx), npus=npus,
                           method=chosen or C.METHOD_SANDBOX, resource=resource, image=image, user=user,
                           ssh_keys=keys, cores=cpu, memory=memory, instancetype=instancetype, preference=preference,
                           pvc=pvc, datavolume_source=datavolume_source, disk_size=disk_size,
                           node_product=node_product)
    found = None
    if chosen is None or (chosen == C.METHOD_SANDBOX and not resource):
        found = resolve_for(ctx.obj.kube(), method=chosen, resource=resource, product=product, npus=npus,
                            node_product=node_product)
    else:
        # Everything was given: the cluster is read only for what would stop the VM there (gates, DeviceClass,
        # capacity); a manifest written away from any cluster is still written.
        try:
            found = resolve_for(advisory(ctx.obj.kube()), method=chosen, resource=resource, product=product, npus=npus,
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


# -- list ---------------------------------------------------------------------------------------------------


def compact_devices(devices: Any) -> str:
    """A VM's NPUs in a few characters: `8x RBLN-CA22_PF`, `2x claim/rbln-npu` (each entry: -o wide); `devices`:
    the devices of a VmNpuList item's document."""
    counts: dict[str, int] = {}
    for d in devices:
        key = d["resource"].removeprefix(C.RESOURCE_PREFIX) if d["resource"] else f"claim/{d['claim']}"
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{n}x {k}" for k, n in counts.items()) or "<none>"


def _vm_status(i: dict) -> str:
    marker = restart_marker(i)
    return i["status"] + (f",{marker}" if marker else "") + (",ClaimCollision" if i["claimCollisions"] else "")


def _vm_npus(i: dict) -> str:
    """NPUS: a change staged for the next restart shows what the VMI passes now -> what the VM asks for."""
    held = i["runningNpus"]
    return f"{held}->{i['npus']}" if i["restartPending"] and held != i["npus"] else str(i["npus"])


def _source(d: dict) -> str:
    """A device document's source (rblnctl.vm.model.NpuDevice.source): its resource, or `claim/request`."""
    return d["resource"] or f"{d['claim']}/{d['request']}"


# DEVICES (the compact form, spaces in it) comes last, so awk's fields before it stay put; every hostDevices
# entry (npu0=rebellions.ai/RBLN-CA22_PF,...) is in -o wide.
_VM_COLUMNS = (Column("NAME"), Column("STATUS", value=_vm_status), Column("NODE"), Column("NPUS", value=_vm_npus),
               Column("METHOD"), Column("KIND", wide=True), Column("HELD", wide=True, value="runningNpus"),
               Column("HOST DEVICES", wide=True,
                      value=lambda i: joined(f"{d['name']}={_source(d)}" for d in i["devices"])),
               Column("DEVICES", value=lambda i: compact_devices(i["devices"])))


def _list_view(listing: Any, sort_by: str | None = None) -> Any:
    from rblnctl.cli.output import View, rows
    from rblnctl.cli.output import sort_by as sorted_by
    from rblnctl.documents import VM_NPU_ITEM, VM_NPU_LIST, body

    every = listing.namespace is None
    items = sorted_by(listing.items, sort_by, VM_NPU_ITEM)
    doc = body(VM_NPU_LIST, spell, listing=listing, items=items)
    t = rows(doc["items"], *([Column("NAMESPACE")] if every else []), *_VM_COLUMNS)
    where = "any namespace" if every else f"namespace {listing.namespace}"
    notes = list(listing.notes) + ([] if listing.items else [f"No VM with NPUs found in {where}."])
    notes += [f"warning: VM {e.ref} on {e.node} has a DRA claim of the same name as {', '.join(e.collisions)}: the "
              "RBLN DRA driver prepares one claim of a name per node, so one of them cannot start; give each its own "
              f"name with `rblnctl vm attach {e.ref.name} -n {e.ref.namespace} --restart`" for e in listing.collisions]
    return View(kind="VmNpuList", body=doc, tables=[t] if listing.items else [], notes=notes,
                names=[f"{i['kind'].lower()}.kubevirt.io/{i['name']}" for i in doc["items"]])


@app.command("list", short_help="List VMs that hold or request NPUs.", epilog=LIST_EXAMPLES)
def list_vms(
    ctx: typer.Context,
    watch: WatchOpt = False,
    sort_by: Annotated[str | None, sort_by_option("'{.npus}' or .node")] = None,
    selector: Annotated[str | None, typer.Option("--selector", "-l", metavar="SELECTOR", show_default=False,
                                                 help="Only VMs whose labels match, as kubectl get vm -l (and "
                                                 "standalone VMIs whose own labels match), e.g. -l team=ml.")] = None,
    output: OutputOpt = "table",
) -> None:
    """List VMs and VMIs that hold or request NPUs."""
    from rblnctl.cli.output import check_sort_by, emit
    from rblnctl.vm.listing import list_vm_npus

    check_sort_by(sort_by)  # bad input fails before connecting
    namespace = None if ctx.obj.all_namespaces else _namespace(ctx)
    if watch:
        from rblnctl.cli.status import follow, warn_retrying
        from rblnctl.vm.listing import vm_changes, watch_vm_npus

        follow(watch_vm_npus(ctx.obj.kube(), namespace=namespace, selector=selector, on_retry=warn_retrying),
               view_of=lambda listing: _list_view(listing, sort_by), changes_of=vm_changes, output=output)
        return
    emit(_list_view(list_vm_npus(ctx.obj.kube(from_cache=True), namespace=namespace, selector=selector), sort_by),
         output)


# -- diagnose -------------------------------------------------------------------------------------------------


_LINK_COLUMNS = (Column("LINK", value="name"),
                 Column("STATUS", value=lambda link: Cell(link["status"], "green" if link["status"] == "PASS"
                                                          else "red")),
                 Column("EVIDENCE", value=lambda link: "; ".join(link["evidence"])))


def _diagnosis_view(d: Any, ctx: Any) -> Any:
    from rblnctl.cli.output import View, rows
    from rblnctl.cli.rerun import Voice
    from rblnctl.documents import VM_DIAGNOSIS

    doc = VM_DIAGNOSIS(d, Voice(ctx))
    head = [f"VM {d.vm}: " + ("not found" if not d.found else f"{doc['npus']} NPU(s) through {doc['method']}"
                              if doc["npus"] else "no NPU requested")]
    broken = next((link for link in doc["links"] if link["name"] == doc["broken"]), None)
    if broken is None:
        tail = ["every link holds: the VM has its NPUs"]
    else:
        tail = [f"broken link: {broken['name']} ({broken['failure']})"]
        if broken["remedy"] is not None:
            tail.append(f"remedy: {broken['remedy']}")
    return View(kind="VmDiagnosis", body=doc, preamble=head, tables=[rows(doc["links"], *_LINK_COLUMNS)],
                epilogue=tail, notes=[f"warning: {w}" for w in doc["warnings"]],
                names=[f"virtualmachine.kubevirt.io/{d.vm.name}"])


@app.command("diagnose", short_help="Say why a VM has no NPU.", epilog=DIAGNOSE_EXAMPLES)
def diagnose(ctx: typer.Context, vm: VmArg, output: OutputOpt = "table") -> None:
    """Say why a VM has no NPU, link by link, with remedies."""
    from rblnctl.cli.console import waiting
    from rblnctl.cli.output import emit
    from rblnctl.kube import validate_name
    from rblnctl.vm.diagnose import diagnose as walk
    from rblnctl.vm.model import VmDiagnosisFailed

    validate_name(vm, kind="VirtualMachine")
    namespace = _namespace(ctx)
    with waiting(f"diagnosing VM {namespace}/{vm}..."):
        d = walk(ctx.obj.kube(), vm, namespace)
    emit(_diagnosis_view(d, ctx), output)
    if d.broken is not None:
        raise VmDiagnosisFailed(str(d.summary()))


# -- fit ------------------------------------------------------------------------------------------------------


def _unknown(value: Any) -> str:
    return "<unknown>" if value is None else str(value)


_FIT_COLUMNS = (Column("NODE", value="name"), Column("MODE"), Column("NPUS", value="allocatable"),
                Column("ALLOCATED", value=lambda n: _unknown(n["allocated"])),
                Column("FREE", value=lambda n: _unknown(n["free"])),
                Column("FITS", value=lambda n: Cell(str(n["fits"]), "green" if n["fits"] else "")),
                Column("HELD BY", wide=True, value=lambda n: ",".join(n["holders"]) or "<none>"),
                Column("REASON", value=lambda n: n["reason"] or ""))


def _fit_view(ctx: typer.Context, f: Any) -> Any:
    from rblnctl.cli.output import View, rows
    from rblnctl.cli.rerun import Voice
    from rblnctl.documents import VM_FIT

    doc = VM_FIT(f, Voice(ctx))  # a warning that is a Remedy names its command
    t = rows(doc["nodes"], *_FIT_COLUMNS)
    tail = []
    if doc["never"]:
        most = doc["most"]
        tail.append(f"never: no node a VM may run on has {doc['npus']} {doc['resource']} at all (the most is "
                    f"{most['npus']}, on {most['node']}); freeing NPUs would not help")
    return View(kind="VmFit", body=doc, preamble=[f.summary()], tables=[t] if doc["nodes"] else [],
                epilogue=tail, notes=[f"warning: {w}" for w in doc["warnings"]] + [f"note: {n}" for n in doc["notes"]]
                + ([] if doc["nodes"] else ["No NPU nodes found."]),
                names=[f"node/{n['name']}" for n in doc["nodes"] if n["fits"]])


@app.command("fit", short_help="How many VMs of N NPUs fit now, and where.", epilog=FIT_EXAMPLES)
def fit(
    ctx: typer.Context,
    npus: Annotated[int, typer.Option("--npus", metavar="K", min=1, max=C.MAX_VM_NPUS,
                                      help="NPUs each VM asks for (all from one node).", show_default=False)],
    count: Annotated[int, typer.Option("--count", metavar="N", min=1,
                                       help="How many such VMs must fit (exit 1 when fewer do).")] = 1,
    resource: ResourceOpt = None,
    product: ProductOpt = None,
    method: MethodOpt = None,
    output: OutputOpt = "table",
) -> None:
    """Say how many VMs of K NPUs fit now and on which nodes, counted as the scheduler counts.

    Each VM's NPUs come from one node: a node with F free NPUs of the VM's kind holds F // K of them. Only
    vm-passthrough nodes that advertise the VM's resource (DRA: offer vfio devices; one a NoSchedule/NoExecute
    device taint keeps away is not free) count, and only where a VM with no placement of its own may land
    (kubevirt.io/schedulable=true, which virt-handler sets; no cordon, no NoSchedule/NoExecute taint). Every
    other node says why. A resource container-mode nodes advertise too (a policy whose two plugins share a name)
    gets a warning: the scheduler may place the VM there.
    """
    from rblnctl.cli.console import waiting
    from rblnctl.cli.output import emit
    from rblnctl.errors import InvalidInput
    from rblnctl.vm.fit import FitOptions, VmFitFailed
    from rblnctl.vm.fit import fit as answer

    if resource and product:
        raise InvalidInput("--resource and --product cannot be combined")
    options = FitOptions(npus=npus, count=count, method=method.value if method else None, resource=resource,
                         product=product)  # bad input fails before connecting
    with waiting("reading the NPU nodes..."):
        f = answer(ctx.obj.kube(from_cache=True), options)
    emit(_fit_view(ctx, f), output)
    if not f.ok:
        raise VmFitFailed(f.summary())


# -- start / stop / restart -------------------------------------------------------------------------------------

WaitOpt = Annotated[
    bool, typer.Option("--wait", help="Wait until the VM is Ready with its NPUs attached (stop: until its VMI and "
                       "virt-launcher pod are gone, its NPUs free), showing progress on stderr.")
]
WaitTimeoutOpt = Annotated[
    str, typer.Option("--timeout", metavar="DURATION", help="With --wait (or a start of a VM still stopping): how "
                      "long to wait (seconds or 90s, 5m, 1h); not there by then is exit 5.")
]


class Waiting(OptionGroup):
    """--wait and --timeout of vm start, stop and restart."""

    wait: WaitOpt = False
    timeout: WaitTimeoutOpt = "5m"

    @property
    def timeout_s(self) -> float:
        return timeout_s(self.timeout)


_LIFECYCLE_COLUMNS = (  # a row: the VM's name and its state's document (VmLifecycle before, or result.state)
    Column("NAME"), Column("STATUS", value="printableStatus"), Column("RUNSTRATEGY", value="runStrategy"),
    Column("VMI", value="vmi.phase"), Column("NODE", value="vmi.node"),
    Column("NPUS", value=lambda st: "<none>" if st["npus"] is None else f"{st['npus']['held']}/{st['npus']['wanted']}"),
    Column("ATTACHED", value=lambda st: "<none>" if st["npus"] is None else "yes" if st["npus"]["attached"] else "no"))


def _lifecycle_view(plan: Any, result: Any = None) -> Any:
    from rblnctl.cli.output import View, rows
    from rblnctl.documents import VM_LIFECYCLE, body

    doc = body(VM_LIFECYCLE, spell, plan=plan, result=result)
    state = doc["result"]["state"] if result is not None else doc["before"]
    t = rows([{"name": doc["vm"]["name"], **state}], *_LIFECYCLE_COLUMNS)
    what = plan.why if plan.send else f"nothing to ask: {plan.why}" if plan.why else "refused"
    if result is not None and result.waited and not plan.send:  # the why described the VM before the wait
        what = "nothing to ask"
    head = [f"VirtualMachine {plan.vm}: {plan.action}: {what}"]
    live = (result.state if result is not None else plan.before).live
    a = state["npus"]
    tail = [f"waiting for: {'; '.join(a['missing'])}"] if a is not None and a["missing"] and live else []
    return View(kind="VmLifecycle", body=doc, preamble=head, tables=[t],
                epilogue=tail, names=[f"virtualmachine.kubevirt.io/{plan.vm.name}"])


def _lifecycle(ctx: typer.Context, action: str, vm: str, *, waiting: Waiting, mutation: Mutating,
               output: Any) -> None:
    from rblnctl.cli.flow import Mutation, run
    from rblnctl.kube import validate_name
    from rblnctl.vm.lifecycle import VmLifecycle

    validate_name(vm, kind="VirtualMachine")  # bad input fails before connecting
    seconds = waiting.timeout_s
    namespace = _namespace(ctx)
    how = mutation.how
    progress = Progress(server_dry_run=mutation.server)
    life = VmLifecycle(kube=ctx.obj.kube(), timeout_s=seconds, server_dry_run=mutation.server,
                       on_step=progress.say, on_state=progress.vm_state)
    plan = life.plan(action, vm, namespace, wait=waiting.wait)
    ref = plan.vm

    def verdict(st: Any) -> str:  # from the state the wait returned: one final read (rblnctl.vm.lifecycle)
        if action == "stop":
            return "stopped: its NPUs are free"
        a = st.attachment
        return f"Ready on {st.node} with {a.held if a else 0} NPU(s) attached"

    def done(result: Any) -> str:
        if result.overtaken:  # refused, and the VM got there anyway: no request of ours did it
            return (f"VM {ref}: virt-api refused the {action} ({result.overtaken}): the VM got there meanwhile"
                    + (f"; it is {verdict(result.state)}" if result.waited else ""))
        if result.waited:
            return f"VM {ref} {'is ' if action != 'stop' else ''}{verdict(result.state)}"
        return f"VM {ref}: {action} requested ({plan.why})"

    def noop(result: Any) -> str:
        if result is not None and result.waited:  # said of the state waited for, not of the one planned from
            from rblnctl.vm.lifecycle import decide

            why = decide(action, result.state)[1] or plan.why
            return f"VM {ref}: {why}; nothing to ask; it is {verdict(result.state)}"
        return f"VM {ref}: {plan.why}; nothing to ask"

    def interrupted() -> None:
        from rblnctl.cli.console import warn
        from rblnctl.cli.rerun import render
        from rblnctl.remedy import Command

        # a start of a starting VM (a stop of a stopping one) asks nothing more and follows it again; it keeps
        # every flag given (--context, --kubeconfig, --timeout): the hint acts on the same cluster
        follow = Command.own("vm", "stop" if action == "stop" else "start", ref.name, again=True,
                             namespace=ref.namespace, wait=True)
        again = f"`{render(ctx, follow)}`"
        listing = f"`{render(ctx, Command.own('vm', 'list', namespace=ref.namespace))}`"
        if life.made is not None:
            warn(f"the {life.made} request for VM {ref} was made and KubeVirt carries it out without rblnctl; "
                 f"{again} follows it again")
        elif life.asked is not None:
            from rblnctl.cli.rerun import command_line

            seen = life.settle_asked(ref)  # read back once
            if seen:
                warn(f"the {life.asked} request for VM {ref} was made (read back) and KubeVirt carries it out without "
                     f"rblnctl; {again} follows it again")
            elif seen is False and life.asked == "restart":  # a start or stop asked again is idempotent, a restart not
                warn(f"the restart request for VM {ref} had not taken effect when rblnctl stopped (its VMI is the one "
                     f"it had): `{command_line(ctx)}` asks again (a request still in "
                     f"flight could land first: {listing} shows whether the VMI is new)")
            else:
                warn(f"the {life.asked} request for VM {ref} may have been made; {listing} "
                     f"shows where it is, {again} follows it")
        elif plan.send is not None:
            warn(f"no {plan.send} was asked for VM {ref}" + (
                f": it was still stopping and ends stopped; "
                f"`{render(ctx, Command.own('vm', 'start', ref.name, namespace=ref.namespace))}` starts "
                "it" if plan.before.stopping else ""))

    run(Mutation(
        plan=plan, apply=life.apply, refusal=f"refusing to {action} VM {ref}",
        question=f"{action.capitalize()} VM {ref} (its guest shuts down)?", disruptive=action in ("stop", "restart"),
        dry_run=how, yes=mutation.yes, output=output, plan_view=_lifecycle_view,
        result_view=lambda r: _lifecycle_view(r.plan, r),
        noop_message=noop,
        done_message=done, on_interrupt=interrupted, progress=progress,
    ))


@app.command("start", short_help="Start a VM; --wait until its NPUs are attached.", epilog=START_EXAMPLES)
@grouped
def start(ctx: typer.Context, vm: VmArg, waiting: Waiting = Waiting.options(),
          mutation: Mutating = Mutating.options(yes=True), output: OutputOpt = "table") -> None:
    """Start a VirtualMachine through virt-api (idempotent: a running VM is left as it is, exit 0).

    A VM still stopping (its VMI shutting down) is started once it has stopped (bounded by --timeout).
    """
    _lifecycle(ctx, "start", vm, waiting=waiting, mutation=mutation, output=output)


@app.command("stop", short_help="Stop a VM (its NPUs are freed).", epilog=STOP_EXAMPLES)
@grouped
def stop(ctx: typer.Context, vm: VmArg, waiting: Waiting = Waiting.options(), mutation: Mutating = Mutating.options(),
         output: OutputOpt = "table") -> None:
    """Stop a VirtualMachine through virt-api (idempotent: a stopped VM is left as it is, exit 0); asks first."""
    _lifecycle(ctx, "stop", vm, waiting=waiting, mutation=mutation, output=output)


@app.command("restart", short_help="Restart a VM; --wait until its NPUs are attached again.",
             epilog=RESTART_EXAMPLES)
@grouped
def restart(ctx: typer.Context, vm: VmArg, waiting: Waiting = Waiting.options(),
            mutation: Mutating = Mutating.options(), output: OutputOpt = "table") -> None:
    """Restart a VirtualMachine through virt-api: a new VMI (a stopped VM is started); asks first."""
    _lifecycle(ctx, "restart", vm, waiting=waiting, mutation=mutation, output=output)
