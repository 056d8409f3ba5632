"""What the cluster offers VMs, read once, and the checks `vm attach` refuses on and `vm diagnose` reports.

Each check returns a Check (holds or not, the evidence, the remedy): attach turns a failing one into a
refusal, diagnose into a FAIL link, so the two commands never disagree. The rules are the owners'
(rblnctl.kubevirt.gates for gates, rblnctl.operator for modes and resource names); this module only
gathers the facts a VM depends on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rblnctl import constants as C
from rblnctl.errors import Ambiguous, InvalidInput, NotFound
from rblnctl.kube import DEVICE_CLASSES, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS, RESOURCE_SLICES, Kube
from rblnctl.kube.optional import NOTE, OnForbidden, optional
from rblnctl.kube.parallel import start
from rblnctl.kubevirt.cr import find_kubevirt, lookup, ref, version_of
from rblnctl.kubevirt.devices import PCI_HOST_DEVICES, names_checked
from rblnctl.kubevirt.gates import DISABLED_GATES, FEATURE_GATES, GateState, gate_state, rbln_gates
from rblnctl.operator import resources as R
from rblnctl.operator.cluster import OperatorView, read_operator
from rblnctl.operator.capacity import dra_devices
from rblnctl.operator.nodes import labels_of, list_npu_node_objects, mode_of
from rblnctl.operator.policy import Policy
from rblnctl.operator.release import UNKNOWN, OperatorRelease, read_release
from rblnctl.versions import parse_version
from rblnctl.vm import devices as D
from rblnctl.remedy import Command, Remedy
from rblnctl.vm.model import NpuDevice


@dataclass(frozen=True, kw_only=True)
class Check:
    """One fact a VM's NPUs depend on: whether it holds, what shows it, and how to fix it."""

    ok: bool
    evidence: tuple[str, ...]
    remedy: Remedy | None = None
    warning: str | None = None  # holds (or cannot tell), but worth saying

    @property
    def message(self) -> str:
        """The evidence as one line."""
        return "; ".join(self.evidence)


@dataclass(frozen=True, kw_only=True)
class DraFacts:
    """The DRA side: the passthrough DeviceClass and the vfio devices ResourceSlices offer, per node."""

    device_class: str
    device_class_found: bool
    vfio: dict[str, list[str]]  # node -> vfio-* devices its slices offer (driver of the policy)
    slices_readable: bool = True


@dataclass(frozen=True, kw_only=True)
class VmCluster:
    """What a VM plan needs to know about the cluster (read by read_cluster; reused across VMs)."""

    kubevirt: dict | None
    kubevirt_problem: str | None  # why no KubeVirt CR was found
    operator: OperatorView
    nodes: tuple[dict, ...]  # NPU node objects
    vm_nodes: tuple[str, ...]  # NPU nodes whose effective mode is vm-passthrough
    advertised: dict[str, list[str]]  # VM resources vm-mode nodes advertise -> those nodes
    dra: DraFacts | None = None  # read when a DRA plan needs it (with_dra)
    release: OperatorRelease = UNKNOWN  # which enabled VM allocators the operator's release makes serve VMs
    notes: tuple[str, ...] = field(default=())

    @property
    def policy(self) -> Policy | None:
        """The RBLNClusterPolicy the operator acts on."""
        return self.operator.policy

    @property
    def vm_resources(self) -> R.ResourceNames:
        """The names the sandbox device plugin advertises under the active policy."""
        return self.policy.vm_resources if self.policy else R.ResourceNames(mode=C.MODE_VM)

    @property
    def device_class(self) -> str:
        """The passthrough DeviceClass of the policy's DRA driver (vfio-npu.rebellions.ai by default)."""
        return self.policy.dra_device_class_vm if self.policy else C.DRA_DEVICECLASS_VM

    @property
    def dra_driver(self) -> str:
        """The policy's DRA driver name."""
        return self.policy.dra_driver if self.policy else C.DRA_DRIVER

    def node(self, name: str) -> dict | None:
        """The NPU node object of that name."""
        return next((n for n in self.nodes if (n.get("metadata") or {}).get("name") == name), None)


def read_cluster(kube: Kube) -> VmCluster:
    """Read the KubeVirt CR, the operator's policy and release, and the NPU nodes (four reads, the first three at
    once: rblnctl.kube.parallel, their errors in this order; DRA: with_dra())."""
    notes: list[str] = []
    kv: dict | None = None
    problem: str | None = None
    kv_read = start(lambda: find_kubevirt(kube))
    view_read = start(lambda: read_operator(kube))
    nodes_read = start(lambda: tuple(list_npu_node_objects(kube)))
    try:
        kv = kv_read.result()
    except (NotFound, Ambiguous) as e:
        problem = str(e)
    view = view_read.result()
    notes.extend(view.notes)
    nodes = nodes_read.result()
    vm_nodes = tuple(n["metadata"]["name"] for n in nodes if mode_of(labels_of(n), view.policy).effective == C.MODE_VM)
    names = view.policy.vm_resources if view.policy else R.ResourceNames(mode=C.MODE_VM)
    advertised = R.advertised([n for n in nodes if n["metadata"]["name"] in vm_nodes], names)
    return VmCluster(kubevirt=kv, kubevirt_problem=problem, operator=view, nodes=nodes, vm_nodes=vm_nodes,
                     advertised=advertised, release=read_release(kube, view.deployments), notes=tuple(notes))


def with_dra(kube: Kube, cluster: VmCluster) -> VmCluster:
    """The same facts plus the DRA side (one GET of the DeviceClass, one LIST of the driver's ResourceSlices)."""
    if cluster.dra is not None:
        return cluster
    # A 404 says the same either way: no such class, or resource.k8s.io/v1 not served at all.
    found = kube.get_optional(DEVICE_CLASSES, cluster.device_class) is not None
    vfio: dict[str, list[str]] = {}
    # Not served (Kubernetes < 1.34, or DRA off): no slices. Refused: unknown, said by DraFacts.readable.
    read = optional(lambda: kube.list(RESOURCE_SLICES, field_selector=f"spec.driver={cluster.dra_driver}"),
                    what="list ResourceSlices", absent=[], on_forbidden=OnForbidden.UNKNOWN)
    readable = read.known
    for s in read.value or []:
        node = str((s.get("spec") or {}).get("nodeName") or "")
        devices, _ = dra_devices([s])
        if node and devices:
            vfio.setdefault(node, []).extend(devices)
    return dataclasses.replace(cluster, dra=DraFacts(device_class=cluster.device_class, device_class_found=found,
                                                     vfio={k: sorted(v) for k, v in sorted(vfio.items())},
                                                     slices_readable=readable))


# -- choices ------------------------------------------------------------------------------------------


def choose_method(asked: str | None, cluster: VmCluster, current: str | None) -> tuple[str, list[str]]:
    """The method a VM's NPUs use: asked, else the policy's, else the VM's own, else sandbox; and warnings."""
    warnings: list[str] = []
    policy = cluster.policy
    # The policy's method, counted only where the release makes its allocator serve VMs (rblnctl.operator.release).
    policy_method = policy.vm_method_on(cluster.release) if policy else None
    if asked:
        if policy is not None and policy_method and asked != policy_method:
            warnings.append(f"RBLNClusterPolicy {policy.name} hands NPUs to VMs through {policy_method}, "
                            f"not {asked}: nothing may offer them")
        return asked, warnings
    if policy_method:
        return policy_method, warnings
    if current in C.METHODS:
        return str(current), warnings
    return C.METHOD_SANDBOX, warnings


def product_of(name: str, names: R.ResourceNames) -> list[str]:
    """The product cards (`RBLN-CA22`) a VM resource stands for: from its name, or its resourceList entry."""
    products = list(names.products_of(name))
    try:
        model = C.PCI_DEVICE_MODELS.get(R.device_id_for(name, vm_resources=names))
    except InvalidInput:
        model = None
    if model and not products:
        products = [f"RBLN-{model[0]}"]
    return [p.upper() if p.upper().startswith("RBLN-") else f"RBLN-{p.upper()}" for p in products]


def pick_resource(cluster: VmCluster, *, resource: str | None = None, product: str | None = None,
                  current: list[str] | None = None) -> str | None:
    """The VM resource a sandbox VM should use (None when no vm-mode node advertises any).

    `resource` wins; `product` picks among the advertised ones; else the VM's current resource when
    nodes still advertise it; else the only one advertised. Several candidates raise Ambiguous
    listing them (InvalidInput: the user must name one).
    """
    if resource:
        return R.qualify(resource.strip())
    choices = sorted(cluster.advertised)
    if product:
        wanted = product.strip().upper()
        wanted = wanted if wanted.startswith("RBLN-") else f"RBLN-{wanted}"
        matching = [c for c in choices if wanted in product_of(c, cluster.vm_resources)]
        if len(matching) > 1:
            raise Ambiguous(f"vm-mode nodes advertise {len(matching)} resources for {wanted}: "
                            f"{', '.join(matching)}; name the one to use", choices=matching, options=("resource",))
        return matching[0] if matching else None
    kept = [c for c in (current or []) if c in choices]
    if len(kept) == 1:
        return kept[0]
    if len(choices) == 1:
        return choices[0]
    if not choices:
        return None
    products = {c: product_of(c, cluster.vm_resources) for c in choices}
    if all(len(p) == 1 for p in products.values()) and len({p[0] for p in products.values()}) == len(choices):
        # one product per resource (chart v0.3.0's ATOM_PT, ATOM_MAX_PT): the product is what a user knows
        listed = ", ".join(f"{products[c][0]} ({c}, on {', '.join(cluster.advertised[c])})"
                           for c in sorted(choices, key=lambda c: products[c][0]))
        raise Ambiguous(f"vm-mode nodes offer {len(choices)} NPU products: {listed}; name the product to use",
                        choices=sorted(products[c][0] for c in choices), options=("product",))
    listed = ", ".join(f"{c} (on {', '.join(cluster.advertised[c])})" for c in choices)
    raise Ambiguous(f"vm-mode nodes advertise {len(choices)} NPU resources: {listed}; name the resource or the "
                    "product to use", choices=choices, options=("resource",))


def product_missing(cluster: VmCluster, product: str) -> str:
    """Why `--product` picked nothing, without contradicting the list of what is advertised: which product each
    advertised resource stands for (its name, or the policy's resourceList), the closest product there is, and
    the resources whose product rblnctl cannot tell (`--resource` picks those)."""
    from rblnctl.suggest import did_you_mean

    wanted = product.strip().upper()
    wanted = wanted if wanted.startswith("RBLN-") else f"RBLN-{wanted}"
    known: dict[str, list[str]] = {}
    untold: list[str] = []
    for res, nodes in sorted(cluster.advertised.items()):
        products = product_of(res, cluster.vm_resources)
        for p in products:
            known.setdefault(p, []).append(f"{res} on {', '.join(nodes)}")
        if not products:
            untold.append(res)
    text = f"no vm-passthrough node advertises a resource of product {wanted}{did_you_mean(wanted, known)}"
    if known:
        listed = "; ".join(f"{p}: {', '.join(r)}" for p, r in sorted(known.items()))
        text += f" (products: {listed})"
    if untold:
        text += (f"; {', '.join(untold)} name{'s' if len(untold) == 1 else ''} no product rblnctl knows: pick "
                 f"{'it' if len(untold) == 1 else 'one'} with --resource {untold[0]}")
    return text


# -- checks ---------------------------------------------------------------------------------------------


def set_mode_remedy(cluster: VmCluster) -> Remedy:
    """Switch an NPU node to vm mode (the first one `node set-mode vm` accepts), or say why none can, or that there
    is none."""
    others = [n for n in cluster.nodes if n["metadata"]["name"] not in cluster.vm_nodes]
    if not others:
        return Remedy(text="no node carries Rebellions NPUs: is NFD labelling them (feature.node.kubernetes.io/"
                      "pci-1eff.present)?")
    names = ", ".join(n["metadata"]["name"] for n in others[:5])
    pick, why = _switchable(cluster, others)
    if pick is None:
        return Remedy(text=f"no NPU node can switch to vm mode now ({why}); what the NPU nodes are and hold",
                      command=Command.own("node", "list", output="wide"))
    return Remedy(text=f"switch an NPU node to vm mode (NPU nodes: {names})",
                  command=Command.own("node", "set-mode", "vm", pick))


def _switchable(cluster: VmCluster, nodes: Sequence[Mapping]) -> tuple[str | None, str]:
    """The first of `nodes` (by name) `node set-mode vm` accepts now: no unfinished switch on it, and no blocker
    of the policy for its product under the operator's release (Policy.switch_blockers with the release, the rules
    set-mode refuses by: a v0.3.0 operator's sandbox plugin serves no VM, so it refuses every node); else None and
    why the first one is refused."""
    from rblnctl.operator.nodes import node_product

    why = ""
    for n in sorted(nodes, key=lambda n: str((n.get("metadata") or {}).get("name") or "")):
        md = n.get("metadata") or {}
        if C.SET_MODE_ANNOTATION in (md.get("annotations") or {}):
            why = why or f"{md.get('name')} has an unfinished switch"
            continue
        blockers = cluster.policy.switch_blockers(C.MODE_VM, product=node_product(n), release=cluster.release) \
            if cluster.policy is not None else []
        if not blockers:
            return str(md.get("name") or ""), ""
        why = why or blockers[0].message
    return None, why


def check_kubevirt(cluster: VmCluster) -> Check:
    """A KubeVirt CR exists (and is the only one)."""
    if cluster.kubevirt is None:
        return Check(ok=False, evidence=(cluster.kubevirt_problem or "no KubeVirt CR found",),
                     remedy=Remedy(text="install KubeVirt (https://kubevirt.io/user-guide/cluster_admin/installation/)"))
    kv = cluster.kubevirt
    return Check(ok=True, evidence=(f"KubeVirt {ref(kv)} {version_of(kv) or '(version unknown)'}",))


def gate_states(cluster: VmCluster, method: str) -> list[GateState]:
    """The feature gates the method needs, as the installed KubeVirt evaluates them."""
    if cluster.kubevirt is None:
        return []
    _, fg = lookup(cluster.kubevirt, FEATURE_GATES)
    _, dis = lookup(cluster.kubevirt, DISABLED_GATES)
    return [gate_state(g, [str(x) for x in fg or []], [str(x) for x in dis or []], version_of(cluster.kubevirt))
            for g in rbln_gates(dra=method == C.METHOD_DRA)]


def check_gates(cluster: VmCluster, method: str) -> Check:
    """HostDevices (and for DRA HostDevicesWithDRA) are on: KubeVirt's admission rejects the VM otherwise."""
    found = check_kubevirt(cluster)
    kubevirt = cluster.kubevirt
    if not found.ok or kubevirt is None:
        return found
    states = gate_states(cluster, method)
    off = [s for s in states if s.effective is False]
    unknown = [s for s in states if s.effective is None]
    evidence = tuple(f"{s.name}: {'on' if s.effective else 'off' if s.effective is False else 'unknown'} ({s.reason})"
                     for s in states)
    command = Command.own("kubevirt", "enable-gates", dra=method == C.METHOD_DRA)
    if off:
        return Check(ok=False, evidence=evidence, remedy=Remedy(
            text=f"enable {', '.join(s.name for s in off)} in KubeVirt {ref(kubevirt)}", command=command))
    warning = None
    if unknown:
        warning = f"cannot tell whether {', '.join(s.name for s in unknown)} is on: {unknown[0].reason}"
    if method == C.METHOD_DRA:
        version = parse_version(version_of(kubevirt))
        floor = C.MIN_KUBEVIRT[C.METHOD_DRA]
        if version is not None and version < floor:
            warning = (f"DRA host devices need KubeVirt >= {'.'.join(map(str, floor))}; KubeVirt "
                       f"{ref(kubevirt)} is {version_of(kubevirt)}")
    return Check(ok=True, evidence=evidence, warning=warning)


def permitted_entry(cluster: VmCluster, resource: str) -> Mapping | None:
    """The permittedHostDevices.pciHostDevices entry for `resource` (None: not permitted)."""
    if cluster.kubevirt is None:
        return None
    _, entries = lookup(cluster.kubevirt, PCI_HOST_DEVICES)
    return next((e for e in entries or [] if isinstance(e, Mapping) and e.get("resourceName") == resource), None)


def check_permitted(cluster: VmCluster, resource: str) -> Check:
    """The resource is in permittedHostDevices with externalResourceProvider true.

    KubeVirt checks a VM's deviceName against the list when it renders the launcher pod
    (v1.9.0 pkg/virt-controller/services/renderresources.go validatePermittedHostDevices: "HostDevice %s
    is not permitted in permittedHostDevices configuration"), but only when the CR has a permittedHostDevices
    at all (rblnctl.kubevirt.devices.names_checked): without one the resource holds, with a warning to permit it
    before anyone adds the list; externalResourceProvider false would make virt-handler start its own device
    plugin for the resource next to the RBLN sandbox plugin.
    """
    found = check_kubevirt(cluster)
    if not found.ok:
        return found
    entry = permitted_entry(cluster, resource)
    kv = ref(cluster.kubevirt)  # type: ignore[arg-type]
    if entry is None and not names_checked(cluster.kubevirt):
        return Check(ok=True, evidence=(f"KubeVirt {kv} has no permittedHostDevices, so it checks no host device name: "
                                        f"{resource} is let through",),
                     warning=(f"KubeVirt {kv} lists no permittedHostDevices: {resource} runs unlisted, but once anyone "
                              "adds the list KubeVirt refuses every name it does not hold; permit it now"),
                     remedy=Remedy(text=f"permit {resource} as a KubeVirt host device",
                                   command=Command.own("kubevirt", "permit-devices", resource_name=resource)))
    if entry is None:
        return Check(ok=False, evidence=(f"{resource} is not in KubeVirt {kv} permittedHostDevices.pciHostDevices",),
                     remedy=Remedy(text=f"permit {resource} as a KubeVirt host device",
                                   command=Command.own("kubevirt", "permit-devices", resource_name=resource)))
    selector = entry.get("pciVendorSelector")
    if not entry.get("externalResourceProvider"):
        return Check(ok=False, evidence=(f"{resource} ({selector}) is permitted with externalResourceProvider false: "
                                         "KubeVirt would run its own device plugin for it",),
                     remedy=Remedy(text="set externalResourceProvider: true",
                                   command=Command.own("kubevirt", "permit-devices", fix=True)))
    return Check(ok=True, evidence=(f"{resource} ({selector}) permitted, externalResourceProvider true",))


def check_vm_nodes(cluster: VmCluster) -> Check:
    """Some NPU node is in vm-passthrough mode."""
    if not cluster.vm_nodes:
        total = len(cluster.nodes)
        return Check(ok=False, evidence=(f"no NPU node is in vm-passthrough mode ({total} NPU node(s), "
                                         f"{'all in container mode' if total else 'none found'})",),
                     remedy=set_mode_remedy(cluster))
    return Check(ok=True, evidence=(f"vm-passthrough nodes: {', '.join(cluster.vm_nodes)}",))


def check_advertised(cluster: VmCluster, resource: str | None) -> Check:
    """Some vm-mode node advertises the resource (allocatable > 0): the sandbox device plugin offers it there."""
    nodes = check_vm_nodes(cluster)
    if not nodes.ok:
        return nodes
    if resource and resource in cluster.advertised:
        return Check(ok=True, evidence=(f"{resource} advertised by {', '.join(cluster.advertised[resource])}",))
    offered = ", ".join(f"{k} on {', '.join(v)}" for k, v in cluster.advertised.items()) or "none"
    what = resource or f"a VM resource ({cluster.vm_resources.describe()})"
    stuck = _release_problem(cluster, C.COMP_SANDBOX, f"no vm-passthrough node advertises {what}")
    if stuck is not None:
        return stuck
    from rblnctl.suggest import did_you_mean

    wanted = set(product_of(resource, cluster.vm_resources)) if resource else set()
    # a close name of another product (ATOM_MAX_PT, RBLN-CA25, for ATOM_PT, RBLN-CA12) is no typo fix
    alike = [r for r in cluster.advertised if not wanted or wanted & set(product_of(r, cluster.vm_resources))]
    hint = did_you_mean(resource, alike) if resource else ""
    return Check(ok=False, evidence=(f"no vm-passthrough node advertises {what}{hint} (advertised: {offered})",),
                 remedy=_advertise_remedy(cluster, wanted))


def _advertise_remedy(cluster: VmCluster, products: set[str]) -> Remedy:
    """What gets a resource of `products` advertised: a vm-mode node of that product is converging (see what holds
    it); else a container-mode one `node set-mode vm` accepts (Policy.switch_blockers, no unfinished switch)."""
    from rblnctl.operator.nodes import node_product

    def name(n: Mapping) -> str:
        return str((n.get("metadata") or {}).get("name") or "")

    def of(n: Mapping) -> bool:
        return not products or (node_product(n) or "").upper() in products

    mine = [n for n in cluster.nodes if of(n)]
    waiting = sorted(name(n) for n in mine if name(n) in cluster.vm_nodes)
    if waiting:
        return Remedy(text=f"{', '.join(waiting)} {'is' if len(waiting) == 1 else 'are'} in vm mode with that product "
                      "but the sandbox device plugin does not advertise it yet; what holds it",
                      command=Command.own("node", "list", *waiting, output="wide"))
    pick, _ = _switchable(cluster, mine)
    if pick is not None:
        return Remedy(text="the sandbox device plugin advertises a node's NPUs once the operator has converged "
                      "it on vm mode; switch a node with that product", command=Command.own(
                          "node", "set-mode", "vm", pick))
    return Remedy(text="no node with that product can switch to vm mode now; what the NPU nodes are and hold",
                  command=Command.own("node", "list", output="wide"))


def check_device_class(cluster: VmCluster) -> Check:
    """The passthrough DeviceClass (vfio-npu.rebellions.ai) exists (the DRA chart or the operator creates it)."""
    dra = cluster.dra
    if dra is None or not dra.device_class_found:
        # Operator v0.3.0 creates only the container class <driverName> (internal/scope/patch/dra_kubelet_plugin.go
        # handleDeviceClass); the passthrough class vfio-<driverName> comes with the releases whose DRA plugin
        # serves VMs (later main internal/clusterpolicy/components/dra_kubelet_plugin_test.go, vfio-npu.rebellions.ai).
        problem = cluster.release.problem(C.COMP_DRA)
        text = (problem if problem else
                "enable the operator's DRA plugin (RBLNClusterPolicy spec.draKubeletPlugin.enabled: true, "
                "sandboxDevicePlugin off): the releases whose DRA plugin serves VMs create the class (operator "
                "v0.3.0 creates only the container class)")
        return Check(ok=False, evidence=(f"DeviceClass {cluster.device_class} not found",), remedy=Remedy(text=text))
    return Check(ok=True, evidence=(f"DeviceClass {dra.device_class} exists",))


def check_slices(cluster: VmCluster) -> Check:
    """Some vm-mode node's ResourceSlices offer vfio-* devices of the policy's driver."""
    nodes = check_vm_nodes(cluster)
    if not nodes.ok:
        return nodes
    dra = cluster.dra
    if dra is not None and not dra.slices_readable:
        return Check(ok=True, evidence=("cannot list ResourceSlices (forbidden); not checked",),
                     warning="cannot list ResourceSlices (forbidden): whether a node offers vfio devices is unknown")
    offered = {n: d for n, d in (dra.vfio if dra else {}).items() if n in cluster.vm_nodes}
    if not offered:
        stuck = _release_problem(cluster, C.COMP_DRA, f"no ResourceSlice of {cluster.dra_driver} on a "
                                 f"vm-passthrough node offers {C.DRA_VFIO_DEVICE_PREFIX}* devices")
        if stuck is not None:
            return stuck
        return Check(ok=False, evidence=(f"no ResourceSlice of {cluster.dra_driver} on a vm-passthrough node offers "
                                         f"{C.DRA_VFIO_DEVICE_PREFIX}* devices",),
                     remedy=Remedy(text="the DRA plugin publishes vfio devices once vfio-manager has bound the NPUs "
                                   "(it rescans every 30 s); see what is missing on the vm nodes",
                                   command=Command.own("node", "list")))
    return Check(ok=True, evidence=tuple(f"{n}: {len(d)} vfio device(s) ({', '.join(d[:4])}"
                                         f"{' ...' if len(d) > 4 else ''})" for n, d in offered.items()))


# -- which claims are NPU claims --------------------------------------------------------------------------


@dataclass(kw_only=True)
class ClaimIndex:
    """Tell whether a VM's resourceClaims entry asks for NPUs, by the DeviceClass its template or claim requests.

    rblnctl's own entry (rbln-npu) always does. Other entries are looked up in the namespace's
    ResourceClaimTemplates and ResourceClaims, listed once per namespace on first need (a list that is not
    served counts as empty: such claims are not taken for NPUs; a list RBAC refuses adds a note to `notes`,
    which the caller shows: whether those entries ask for NPUs is then unknown, not "no").
    """

    kube: Kube
    classes: frozenset[str]  # the DeviceClasses that hand out NPUs to VMs
    notes: list[str] = field(default_factory=list)  # the lists RBAC refused, one note each
    _objects: dict[tuple[str, str], dict[str, dict]] = field(default_factory=dict)

    def _named(self, kind: str, namespace: str) -> dict[str, dict]:
        key = (kind, namespace)
        if key not in self._objects:
            res = RESOURCE_CLAIM_TEMPLATES if kind == "template" else RESOURCE_CLAIMS
            what = (f"list {'ResourceClaimTemplates' if kind == 'template' else 'ResourceClaims'} in namespace "
                    f"{namespace} (whether its VMs' claims ask for NPUs is unknown)")
            items = optional(lambda: self.kube.list(res, namespace=namespace), what=what, absent=[],
                             on_forbidden=NOTE, notes=self.notes).value or []
            self._objects[key] = {str((o.get("metadata") or {}).get("name") or ""): o for o in items}
        return self._objects[key]

    def _object(self, namespace: str, entry: Mapping) -> dict | None:
        """The ResourceClaimTemplate (or ResourceClaim) a resourceClaims entry names (None: not found)."""
        if entry.get("resourceClaimTemplateName"):
            return self._named("template", namespace).get(str(entry["resourceClaimTemplateName"]))
        if entry.get("resourceClaimName"):
            return self._named("claim", namespace).get(str(entry["resourceClaimName"]))
        return None

    def requested_classes(self, namespace: str, entry: Mapping) -> list[str]:
        """The DeviceClasses the entry's template (or claim) requests ([] when unknown)."""
        obj = self._object(namespace, entry)
        return [cls for _, cls, _ in D.claim_requests(obj)] if obj else []

    def tolerations(self, namespace: str, spec: Mapping, devices: Sequence[NpuDevice]) -> tuple[tuple[dict, ...], ...]:
        """The device tolerations of each DRA NPU's request (its claim's template or claim; none when unknown):
        what keeps a tainted device from the VM or not (rblnctl.operator.capacity.device_taint)."""
        entries = {str(e.get("name") or ""): e for e in D.resource_claims(spec)}
        out = []
        for d in devices:
            obj = self._object(namespace, entries.get(str(d.claim), {}))
            out.append(D.request_tolerations(obj, str(d.request)) if obj else ())
        return tuple(out)

    def is_npu(self, namespace: str, entry: Mapping) -> bool:
        """Whether the entry is rblnctl's claim, or one whose requests ask for an NPU DeviceClass."""
        return D.is_managed_claim(entry) or any(c in self.classes for c in self.requested_classes(namespace, entry))

    def test(self, namespace: str) -> D.ClaimTest:
        """is_npu() bound to a namespace, for devices.npus_of()."""
        return lambda entry: self.is_npu(namespace, entry)


def claim_index(kube: Kube, cluster: VmCluster) -> ClaimIndex:
    """A ClaimIndex for the policy's passthrough class (and the default one)."""
    return ClaimIndex(kube=kube, classes=frozenset({cluster.device_class, C.DRA_DEVICECLASS_VM}))


def _release_problem(cluster: VmCluster, allocator: str, missing: str) -> Check | None:
    """A failing Check when nothing is offered because the operator's release never makes `allocator` serve
    VMs (chart v0.3.0's sandbox plugin waits in Init on vm nodes; its DRA plugin is container-only): the way
    out is an upgrade, not waiting for a node. None when the release serves VMs (or its version is unknown)."""
    why = cluster.release.why(allocator)
    if why is None:
        return None
    return Check(ok=False, evidence=(missing, why), remedy=Remedy(text=cluster.release.remedy(allocator)))
