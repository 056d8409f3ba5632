"""A complete VirtualMachine manifest with N NPUs (and, for DRA, its ResourceClaimTemplate), for manifests kept in git.

The VM boots a container disk with cloud-init, as KubeVirt's and the RBLN DRA driver's examples do
(RBLN-SW/rbln-k8s-dra-driver examples/kubevirt-vm-passthrough.md); its NPU entries are the ones
`vm attach` writes (rblnctl.vm.devices), so a VM made from it and one attached later look the same.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from rblnctl import constants as C
from rblnctl.errors import InvalidInput, NotFound
from rblnctl.kube import Kube, validate_name
from rblnctl.operator import resources as R
from rblnctl.vm import devices as D


@dataclass(frozen=True, kw_only=True)
class ManifestOptions:
    """What the manifest describes."""

    name: str
    namespace: str | None = None  # None: leave it to `kubectl apply -n` / the context
    # DRA: the namespace the pod-level claim name is derived from when `namespace` is None (the one
    # `kubectl apply` would use: -n, the context's, else default); rblnctl.vm.devices.claim_name
    claim_namespace: str | None = None
    npus: int = 1
    method: str = C.METHOD_SANDBOX
    resource: str | None = None  # sandbox: required
    device_class: str = C.DRA_DEVICECLASS_VM  # dra
    image: str = C.VM_DEFAULT_IMAGE
    cores: int = 4
    memory: str = "8Gi"
    user: str | None = None  # cloud-init's default user (None: the image's own, e.g. ubuntu)
    ssh_keys: tuple[str, ...] = ()  # authorized keys for that user

    def __post_init__(self) -> None:
        validate_name(self.name, kind="VirtualMachine")
        if self.namespace is not None:
            validate_name(self.namespace, kind="namespace")
        if not 1 <= self.npus <= C.MAX_VM_NPUS:
            raise InvalidInput(f"a VM manifest needs 1 to {C.MAX_VM_NPUS} NPUs, not {self.npus}")
        if self.method not in C.METHODS:
            raise InvalidInput(f"unknown method {self.method!r}: use {' or '.join(C.METHODS)}")
        if self.resource:
            object.__setattr__(self, "resource", R.parse_resource(self.resource, what="--resource"))
        if not self.image.strip() or any(c.isspace() for c in self.image):
            raise InvalidInput(f"malformed image {self.image!r}")
        if self.user is not None and not _USER.fullmatch(self.user):
            raise InvalidInput(f"malformed user name {self.user!r}: lower-case letters, digits, '_' and '-', "
                               "starting with a letter or '_', at most 32 characters")
        for key in self.ssh_keys:
            check_ssh_key(key)


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
                    {"name": "cloudinit", "cloudInitNoCloud": {"userData": cloud_config(o.user, o.ssh_keys)}}],
    }
    if o.method == C.METHOD_DRA:
        template = D.claim_template(o.npus, o.device_class, namespace=o.namespace)
        objects.append(template)
        claim = D.claim_name(o.claim_namespace or o.namespace or "default", o.name)
        spec["domain"]["devices"]["hostDevices"] = [D.dra_device(n, i, claim=claim) for i, n in enumerate(names)]
        spec["resourceClaims"] = [D.claim_entry(template["metadata"]["name"], claim=claim)]
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


# useradd's default NAME_REGEX (shadow-utils), 32 characters as cloud-init's distros allow
_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
_KEY_TYPES = ("ssh-", "ecdsa-sha2-", "sk-ssh-", "sk-ecdsa-sha2-")


def cloud_config(user: str | None, ssh_keys: Sequence[str]) -> str:
    """The cloud-init user data, as `virtctl create vm --user NAME --ssh-key KEY` writes it.

    kubevirt/kubevirt pkg/virtctl/create/vm/vm.go (v1.9.0-rc.2), buildCloudInitConfig: the
    `#cloud-config` header, `user: NAME`, then `ssh_authorized_keys:` with one `  - KEY` per key,
    in a cloudInitNoCloud volume's userData. Without either, the bare header (a VM nobody can log
    into unless its image has its own credentials).
    """
    config = "#cloud-config"
    if user:
        config += f"\nuser: {user}"
    if ssh_keys:
        config += "\nssh_authorized_keys:" + "".join(f"\n  - {k}" for k in ssh_keys)
    return config


def check_ssh_key(key: str) -> str:
    """One OpenSSH public key line (`ssh-ed25519 AAAA... comment`); InvalidInput for anything else."""
    parts = key.split()
    if "PRIVATE KEY" in key:
        raise InvalidInput("that is a private key: give the public one (the .pub file)")
    if "\n" in key.strip() or len(parts) < 2 or not parts[0].startswith(_KEY_TYPES):
        raise InvalidInput(f"not an OpenSSH public key: {key[:40]!r}... (expected e.g. `ssh-ed25519 AAAA... "
                           "you@host`, as in a .pub file)")
    return key.strip()


def ssh_keys_in(text: str, *, source: str) -> list[str]:
    """The public keys in an authorized_keys-style text (a .pub file: one per line; blank lines and # comments
    skipped); InvalidInput naming `source` when there is none or a line is not one."""
    if "PRIVATE KEY" in text:
        raise InvalidInput(f"{source} holds a private key: give the public one ({source}.pub?)")
    keys = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            keys.append(check_ssh_key(line))
        except InvalidInput as e:
            raise InvalidInput(f"{source}: {e}") from None
    if not keys:
        raise InvalidInput(f"{source} holds no SSH public key")
    return keys


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
