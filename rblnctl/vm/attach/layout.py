"""What a VM should have and the spec change that gives it (pure): the method, count and resource an attach resolves
to (resolve, attach_target), and which hostDevices and resourceClaims give the VM the NPUs a Target asks for.

Host devices that are not NPUs, and claims that are not rblnctl's, are kept (rblnctl.vm.devices spells each entry).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from rblnctl import constants as C
from rblnctl.plan import Blocker
from rblnctl.remedy import Remedy
from rblnctl.vm import devices as D
from rblnctl.vm.attach.model import ATTACH, DETACH, AttachOptions, Target
from rblnctl.vm.cluster import Check, VmCluster, check_advertised, choose_method, pick_resource, product_missing
from rblnctl.vm.lifecycle import FINAL_PHASES
from rblnctl.vm.model import VmBlocker, VmNpus, VmRef


@dataclass(frozen=True, kw_only=True)
class Choice:
    """What an attach resolves to: the method, the count and (sandbox) the resource."""

    method: str
    npus: int
    resource: str | None
    warnings: tuple[str | Remedy, ...]  # how the method was chosen
    missing: Check | None = None  # sandbox: no resource to name (the check that says what the cluster offers)


def resolve(options: AttachOptions, cluster: VmCluster, have: VmNpus) -> Choice:
    """Resolve method, count and resource for a VM that has `have` (raises Ambiguous: several resources could be
    meant, the caller must name one)."""
    o = options
    current = have.method if have.method in C.METHODS else None
    method, chosen = choose_method(o.method, cluster, current)
    npus = o.npus if o.npus is not None else (have.count or 1)
    resource = None
    missing = None
    if method == C.METHOD_SANDBOX and npus:
        resource = pick_resource(cluster, resource=o.resource, product=o.product, current=have.resources)
        if resource is None:  # nothing to name: refuse with what the cluster offers
            missing = check_advertised(cluster, None)
            if o.product and missing.ok is False and cluster.vm_nodes:
                # what the nodes have, not "advertises nothing ... (advertised: X)", which contradicted itself
                missing = dataclasses.replace(missing, evidence=(product_missing(cluster, o.product),))
    return Choice(method=method, npus=npus, resource=resource, warnings=tuple(chosen), missing=missing)


def attach_target(ref: VmRef, choice: Choice, options: AttachOptions, cluster: VmCluster,
                  npu_claims: tuple[str, ...]) -> Target:
    """The Target of an attach that resolved to `choice`."""
    return Target(action=ATTACH, method=choice.method, npus=choice.npus, resource=choice.resource,
                  device_class=cluster.device_class if choice.method == C.METHOD_DRA else None,
                  convert=options.convert, npu_claims=npu_claims, claim=D.claim_name(ref.namespace, ref.name))


@dataclass(frozen=True, kw_only=True)
class Layout:
    host_devices: list[dict]
    claims: list[dict]
    added: list[str]
    removed: list[str]
    template: str | None
    warnings: list[str]
    blockers: list[Blocker]


def _relayout(spec: dict, have: VmNpus, *, drop: set[str], managed: list[str], new_sandbox: list[dict],
              dra_npus: int | None, claim: str) -> tuple[list[dict], list[dict], str | None]:
    """Apply a change to the spec's lists: drop names, renumber rblnctl's DRA devices (`managed`, in order:
    requests npu0..), append new sandbox entries, and point rblnctl's claim at rbln-npu-<count>.

    rblnctl's claim entry is named `claim` (the VM's own name, rblnctl.vm.devices.claim_name): an entry
    written under another name (the old fixed rbln-npu, or a VM copied from another) is renamed, and its
    host devices follow.
    """
    index = {name: i for i, name in enumerate(managed)}
    devices = []
    for d in D.host_devices(spec):
        name = str(d.get("name") or "")
        if name in drop:
            continue
        devices.append(D.dra_device(name, index[name], d, claim=claim) if name in index else d)
    present = {str(d.get("name")) for d in devices}
    devices += [D.dra_device(n, index[n], claim=claim) for n in managed if n not in present]
    devices += new_sandbox
    count = len(managed) if dra_npus is None else dra_npus
    template = D.template_name(count) if count else None
    referenced = {str(d.get("claimName")) for d in devices if d.get("claimName")}
    referenced |= {str(g.get("claimName")) for g in ((spec.get("domain") or {}).get("devices") or {}).get("gpus") or []
                   if isinstance(g, dict) and g.get("claimName")}
    npu_claims = {d.claim for d in have.dra}
    claims = []
    seen_managed = False
    for c in D.resource_claims(spec):
        name = str(c.get("name") or "")
        if D.is_managed_claim(c) and name not in referenced - {claim}:
            if template and not seen_managed:
                want = D.claim_entry(template, claim=claim)
                claims.append(c if c == want else want)
            seen_managed = True
        elif name in npu_claims and name not in referenced:
            continue  # an NPU claim no host device uses any more
        else:
            claims.append(c)
    if template and not seen_managed:
        claims.append(D.claim_entry(template, claim=claim))
    return devices, claims, template


def express(spec: dict, have: VmNpus, target: Target) -> Layout:
    """The spec lists that give the VM `target.npus` NPUs of `target.method` (pure)."""
    warnings: list[str] = []
    blockers: list[Blocker] = []
    drop: set[str] = set()
    other = have.dra if target.method == C.METHOD_SANDBOX else have.sandbox
    other_method = C.METHOD_DRA if target.method == C.METHOD_SANDBOX else C.METHOD_SANDBOX
    if other:
        names = ", ".join(d.name for d in other)
        if target.convert:
            drop |= {d.name for d in other}
            warnings.append(f"rewriting {len(other)} NPU(s) the VM gets through {other_method} ({names}) as "
                            f"{target.method}")
        else:
            blockers.append(VmBlocker(f"the VM gets {len(other)} NPU(s) through {other_method} ({names}), not "
                                      f"{target.method}: rewriting them changes how the VM gets its NPUs",
                                      override="convert"))
    managed: list[str] = []
    new_sandbox: list[dict] = []
    if target.method == C.METHOD_SANDBOX:
        keep = [d for d in have.sandbox if d.resource == target.resource][: target.npus]
        replaced = [d for d in have.sandbox if d.resource != target.resource]
        if replaced and target.npus:
            old = ", ".join(dict.fromkeys(str(d.resource) for d in replaced))
            warnings.append(f"replacing {len(replaced)} NPU(s) of {old} with {target.resource}")
        drop |= {d.name for d in have.sandbox if d not in keep}
        used = [str(d.get("name")) for d in D.host_devices(spec) if str(d.get("name")) not in drop]
        new = D.free_names(used, target.npus - len(keep))
        new_sandbox = [D.sandbox_device(n, str(target.resource)) for n in new]
        managed = [] if target.convert or not have.dra else [d.name for d in have.dra if d.managed]
        dra_npus = None
    else:
        mine = [d for d in have.dra if d.managed]
        foreign = [d for d in have.dra if not d.managed]
        if foreign:
            warnings.append(f"kept: {len(foreign)} NPU(s) through claims rblnctl does not manage "
                            f"({', '.join(sorted({str(d.claim) for d in foreign}))}); the VM gets them on top of "
                            f"the {target.npus} in {target.claim}")
        keep = mine[: target.npus]
        drop |= {d.name for d in mine[target.npus:]}
        used = [str(d.get("name")) for d in D.host_devices(spec) if str(d.get("name")) not in drop]
        new = D.free_names(used, target.npus - len(keep))
        managed = [d.name for d in keep] + new
        dra_npus = target.npus
    devices, claims, template = _relayout(spec, have, drop=drop, managed=managed, new_sandbox=new_sandbox,
                                          dra_npus=dra_npus, claim=target.claim)
    before = [str(d.get("name")) for d in D.host_devices(spec)]
    return Layout(host_devices=devices, claims=claims, added=new,
                   removed=[n for n in before if n in drop], template=template, warnings=warnings, blockers=blockers)


def remove(spec: dict, have: VmNpus, names: Iterable[str], *, claim: str) -> Layout:
    """The spec lists without the named NPU host devices; rblnctl's remaining DRA devices renumbered (pure)."""
    drop = set(names)
    managed = [d.name for d in have.dra if d.managed and d.name not in drop]
    devices, claims, template = _relayout(spec, have, drop=drop, managed=managed, new_sandbox=[], dra_npus=None,
                                          claim=claim)
    before = [str(d.get("name")) for d in D.host_devices(spec)]
    return Layout(host_devices=devices, claims=claims, added=[], removed=[n for n in before if n in drop],
                   template=template, warnings=[], blockers=[])


def is_running(vmi: dict | None) -> bool:
    """A VMI exists and has not finished: the VM's spec changes only take effect after a restart."""
    return vmi is not None and (vmi.get("status") or {}).get("phase") not in FINAL_PHASES


def layout_for(vm: dict, target: Target) -> Layout:
    """The change `target` asks of this VM object (pure)."""
    spec = D.vm_spec(vm)
    have = D.npus_of(spec, npu_claim=lambda e: e.get("name") in target.npu_claims)
    if target.action == DETACH:
        return remove(spec, have, target.remove, claim=target.claim)
    return express(spec, have, target)


def changes(vm: dict, layout: Layout) -> bool:
    """Whether the layout differs from the VM's lists (else the VM already has what was asked)."""
    return (layout.host_devices, layout.claims) != lists_of(vm)


def ref_of(vm: dict) -> VmRef:
    meta = vm.get("metadata") or {}
    return VmRef(namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""))


def node_of(vmi: dict | None) -> str | None:
    return ((vmi or {}).get("status") or {}).get("nodeName") or None


def phase_of(vmi: dict | None) -> str:
    return str(((vmi or {}).get("status") or {}).get("phase") or "Pending")


def template_count(template: str) -> int:
    return int(template.removeprefix(C.VM_DRA_TEMPLATE_PREFIX))


def lists_of(vm: dict) -> tuple[list[dict], list[dict]]:
    spec = D.vm_spec(vm)
    return D.host_devices(spec), D.resource_claims(spec)
