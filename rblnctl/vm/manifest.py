"""A complete VirtualMachine manifest with N NPUs (and, for DRA, its ResourceClaimTemplate), for manifests kept in git.

The VM boots a container disk with cloud-init, as KubeVirt's and the RBLN DRA driver's examples do
(RBLN-SW/rbln-k8s-dra-driver examples/kubevirt-vm-passthrough.md); its NPU entries are the ones
`vm attach` writes (rblnctl.vm.devices), so a VM made from it and one attached later look the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rblnctl import constants as C
from rblnctl.errors import InvalidInput, NotFound
from rblnctl.kube import Kube, validate_name
from rblnctl.vm import devices as D


@dataclass(frozen=True, kw_only=True)
class ManifestOptions:
    """What the manifest describes."""

    name: str
    namespace: str | None = None  # None: leave it to `kubectl apply -n` / the context
    npus: int = 1
    method: str = C.METHOD_SANDBOX
    resource: str | None = None  # sandbox: required
    device_class: str = C.DRA_DEVICECLASS_VM  # dra
    image: str = C.VM_DEFAULT_IMAGE
    cores: int = 4
    memory: str = "8Gi"

    def __post_init__(self) -> None:
        validate_name(self.name, kind="VirtualMachine")
        if self.namespace is not None:
            validate_name(self.namespace, kind="namespace")
        if not 1 <= self.npus <= C.MAX_VM_NPUS:
            raise InvalidInput(f"a VM manifest needs 1 to {C.MAX_VM_NPUS} NPUs, not {self.npus}")
        if self.method not in C.METHODS:
            raise InvalidInput(f"unknown method {self.method!r}: use {' or '.join(C.METHODS)}")
        if not self.image.strip() or any(c.isspace() for c in self.image):
            raise InvalidInput(f"malformed image {self.image!r}")


def build_manifest(o: ManifestOptions) -> list[dict]:
    """The objects to apply, in order: the ResourceClaimTemplate (DRA) first, then the VirtualMachine."""
    if o.method == C.METHOD_SANDBOX and not o.resource:
        raise InvalidInput("a sandbox VM names the resource its NPUs come from")
    names = D.free_names([], o.npus)
    objects: list[dict] = []
    spec: dict = {
        "domain": {
            "cpu": {"cores": o.cores},
            "memory": {"guest": o.memory},
            "devices": {
                "disks": [{"name": "rootdisk", "disk": {"bus": "virtio"}},
                          {"name": "cloudinit", "disk": {"bus": "virtio"}}],
                "interfaces": [{"name": "default", "masquerade": {}}],
            },
        },
        "networks": [{"name": "default", "pod": {}}],
        "volumes": [{"name": "rootdisk", "containerDisk": {"image": o.image}},
                    {"name": "cloudinit", "cloudInitNoCloud": {"userData": "#cloud-config"}}],
    }
    if o.method == C.METHOD_DRA:
        template = D.claim_template(o.npus, o.device_class, namespace=o.namespace)
        objects.append(template)
        spec["domain"]["devices"]["hostDevices"] = [D.dra_device(n, i) for i, n in enumerate(names)]
        spec["resourceClaims"] = [D.claim_entry(template["metadata"]["name"])]
    else:
        spec["domain"]["devices"]["hostDevices"] = [D.sandbox_device(n, str(o.resource)) for n in names]
    meta: dict = {"name": o.name}
    if o.namespace:
        meta["namespace"] = o.namespace
    objects.append({
        "apiVersion": f"{C.KUBEVIRT_GROUP}/{C.KUBEVIRT_VERSION}", "kind": "VirtualMachine", "metadata": meta,
        "spec": {"runStrategy": "Always",
                 "template": {"metadata": {"labels": {C.VM_NAME_LABEL: o.name}}, "spec": spec}},
    })
    return objects


@dataclass(frozen=True, kw_only=True)
class Resolved:
    """What the cluster decided for a manifest, and what the VM would meet there."""

    method: str
    resource: str | None  # sandbox only
    device_class: str
    warnings: list[str] = field(default_factory=list)  # e.g. more NPUs than any vm-passthrough node offers


def resolve(kube: Kube, *, method: str | None, resource: str | None, product: str | None = None
            ) -> tuple[str, str | None, str]:
    """(method, resource, device class) for a manifest, from the cluster where the caller left them open.

    The rules `vm attach` uses: the policy's method; the only resource vm-mode nodes advertise (or
    the one of `product`); Ambiguous when several fit, NotFound when none does.
    """
    r = resolve_for(kube, method=method, resource=resource, product=product)
    return r.method, r.resource, r.device_class


def resolve_for(kube: Kube, *, method: str | None, resource: str | None, product: str | None = None,
                npus: int | None = None) -> Resolved:
    """resolve(), and with `npus` the warning `vm attach` gives when no vm-passthrough node offers that many
    (rblnctl.vm.cluster.too_many_npus: one computation for both)."""
    from rblnctl.vm.cluster import choose_method, pick_resource, read_cluster, too_many_npus, with_dra

    cluster = read_cluster(kube)
    chosen, _ = choose_method(method, cluster, None)
    if chosen == C.METHOD_SANDBOX and not resource:
        resource = pick_resource(cluster, product=product)
        if resource is None:
            what = f"a resource for {product}" if product else "a VM resource"
            raise NotFound(f"no vm-passthrough node advertises {what}; name the resource to write into the manifest")
    resource = resource if chosen == C.METHOD_SANDBOX else None
    warnings: list[str] = []
    if npus is not None:
        if chosen == C.METHOD_DRA:
            cluster = with_dra(kube, cluster)
        too_many = too_many_npus(cluster, chosen, resource, npus)
        if too_many:
            warnings.append(too_many)
    return Resolved(method=chosen, resource=resource, device_class=cluster.device_class, warnings=warnings)
