"""A complete VirtualMachine manifest with N NPUs (and, for DRA, its ResourceClaimTemplate), for manifests kept in git.

The VM boots a container disk with cloud-init, as KubeVirt's and the RBLN DRA driver's examples do
(RBLN-SW/rbln-k8s-dra-driver examples/kubevirt-vm-passthrough.md); its NPU entries are the ones
`vm attach` writes (rblnctl.vm.devices), so a VM made from it and one attached later look the same.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rblnctl import constants as C
from rblnctl.errors import InvalidInput, NotFound
from rblnctl.kube import Kube, parse_quantity, validate_name, validate_namespace
from rblnctl.remedy import Remedy
from rblnctl.operator import resources as R
from rblnctl.vm import devices as D

if TYPE_CHECKING:
    from rblnctl.vm.cluster import VmCluster


@dataclass(frozen=True, kw_only=True)
class ManifestOptions:
    """What the manifest describes."""

    name: str
    namespace: str | None = None  # None: leave it to `kubectl apply -n` / the context
    # DRA: the namespace the pod-level claim name is derived from when `namespace` is None (the one
    # `kubectl apply` would use: -n, the context's, else default); rblnctl.vm.devices.claim_name. Also the
    # namespace of a --datavolume-source PVC given without one.
    claim_namespace: str | None = None
    npus: int = 1
    method: str = C.METHOD_SANDBOX
    resource: str | None = None  # sandbox: required
    device_class: str = C.DRA_DEVICECLASS_VM  # dra
    cores: int | None = None  # vCPUs (domain.cpu.cores); None: C.VM_DEFAULT_CORES, or the instancetype's
    memory: str | None = None  # guest memory (a quantity); None: C.VM_DEFAULT_MEMORY, or the instancetype's
    instancetype: str | None = None  # [KIND/]NAME of an instancetype.kubevirt.io instancetype (it sizes the VM)
    preference: str | None = None  # [KIND/]NAME of an instancetype.kubevirt.io preference
    image: str | None = None  # the container disk to boot; None: C.VM_DEFAULT_IMAGE unless pvc/datavolume_source
    pvc: str | None = None  # boot from this PersistentVolumeClaim (the VM's namespace)
    datavolume_source: str | None = None  # boot from a DataVolume CDI fills from an http(s)/docker URL or a PVC
    disk_size: str | None = None  # the DataVolume's size (required for a URL; a PVC's own size otherwise)
    node_product: str | None = None  # nodeSelector rebellions.ai/npu.product=<this>
    user: str | None = None  # cloud-init's default user (None: the image's own, e.g. ubuntu)
    ssh_keys: tuple[str, ...] = ()  # authorized keys for that user

    def __post_init__(self) -> None:
        validate_name(self.name, kind="VirtualMachine")
        if self.namespace is not None:
            validate_namespace(self.namespace)
        if not 1 <= self.npus <= C.MAX_VM_NPUS:
            raise InvalidInput(f"a VM manifest needs 1 to {C.MAX_VM_NPUS} NPUs, not {self.npus}")
        if self.method not in C.METHODS:
            raise InvalidInput(f"unknown method {self.method!r}: use {' or '.join(C.METHODS)}")
        if self.resource:
            object.__setattr__(self, "resource", R.parse_resource(self.resource, what="--resource"))
        if self.image is not None and (not self.image.strip() or any(c.isspace() for c in self.image)):
            raise InvalidInput(f"malformed image {self.image!r}")
        if self.user is not None and not _USER.fullmatch(self.user):
            raise InvalidInput(f"malformed user name {self.user!r}: lower-case letters, digits, '_' and '-', "
                               "starting with a letter or '_', at most 32 characters")
        for key in self.ssh_keys:
            check_ssh_key(key)
        self._check_size()
        self._check_disk()
        if self.instancetype is not None:
            object.__setattr__(self, "instancetype", "/".join(matcher(self.instancetype, INSTANCETYPE_KINDS,
                                                                      flag="--instancetype")))
        if self.preference is not None:
            object.__setattr__(self, "preference", "/".join(matcher(self.preference, PREFERENCE_KINDS,
                                                                    flag="--preference")))
        if self.node_product is not None:
            object.__setattr__(self, "node_product", product_label(self.node_product))

    def _check_size(self) -> None:
        if self.instancetype is not None and (self.cores is not None or self.memory is not None):
            given = " and ".join(f for f, v in (("--cpu", self.cores), ("--memory", self.memory)) if v is not None)
            # kubevirt/kubevirt@v1.9.0 pkg/instancetype/apply/cpu.go validateCPU, memory.go validateMemory: a VM
            # naming an instancetype that also sets domain.cpu.cores/sockets/threads or domain.memory.guest is
            # refused by virt-api ("VM field(s) spec.template.spec.domain.cpu.cores conflicts with selected
            # instance type").
            raise InvalidInput(f"{given} cannot be combined with --instancetype: the instancetype sets the VM's CPUs "
                               "and memory, and KubeVirt refuses a VM that sets them too")
        if self.cores is not None and self.cores < 1:
            raise InvalidInput(f"--cpu must be at least 1, not {self.cores}")
        if self.cores is not None and self.cores > _UINT32_MAX:  # kubevirt.io/api core/v1 schema.go: Cores uint32
            raise InvalidInput(f"--cpu must be at most {_UINT32_MAX} (KubeVirt's domain.cpu.cores), not {self.cores}")
        if self.memory is not None and parse_quantity(self.memory, what="--memory") <= 0:
            raise InvalidInput(f"--memory must be more than 0, not {self.memory!r}")

    def _check_disk(self) -> None:
        given = [f for f, v in (("--image", self.image), ("--pvc", self.pvc),
                                ("--datavolume-source", self.datavolume_source)) if v is not None]
        if len(given) > 1:
            raise InvalidInput(f"{' and '.join(given)} cannot be combined: each is the VM's root disk")
        if self.pvc is not None:
            if "/" in self.pvc:
                raise InvalidInput(f"--pvc {self.pvc}: a VM mounts a PVC of its own namespace; give its name alone")
            validate_name(self.pvc, kind="PersistentVolumeClaim")
        if self.disk_size is not None:
            if self.datavolume_source is None:
                raise InvalidInput("--disk-size sizes the DataVolume of --datavolume-source; give that too (a PVC or "
                                   "container disk keeps its own size)")
            if parse_quantity(self.disk_size, what="--disk-size") <= 0:
                raise InvalidInput(f"--disk-size must be more than 0, not {self.disk_size!r}")
        if self.datavolume_source is not None:
            source = datavolume_source(self.datavolume_source, namespace=self.namespace or self.claim_namespace)
            if not ("pvc" in source or self.disk_size):
                # virtctl create vm --volume-import takes a size as optional only for a PVC, snapshot or DataSource
                # (kubevirt/kubevirt@v1.9.0 pkg/virtctl/create/vm/vm.go volumeImportSizeOptional): CDI cannot know
                # how big an import from a URL will be.
                raise InvalidInput(f"--datavolume-source {self.datavolume_source}: an import from a URL needs "
                                   "--disk-size (how big the disk CDI creates is, e.g. 20Gi)")
            validate_name(rootdisk_name(self.name), kind="DataVolume")


_UINT32_MAX = 2**32 - 1

# [KIND/]NAME: the kinds KubeVirt accepts (typed as the kind, its singular or its plural, in any case).
INSTANCETYPE_KINDS = (C.INSTANCETYPE_KIND, C.CLUSTER_INSTANCETYPE_KIND)
PREFERENCE_KINDS = (C.PREFERENCE_KIND, C.CLUSTER_PREFERENCE_KIND)


def matcher(value: str, kinds: tuple[str, str], *, flag: str) -> tuple[str, str]:
    """(kind, name) of `--instancetype`/`--preference` `[KIND/]NAME`; the cluster-wide kind when none is given.

    As virtctl create vm reads it (kubevirt/kubevirt@v1.9.0 pkg/virtctl/create/vm/vm.go withInstancetype:
    `virtualmachineinstancetype/my-it`), with the kind written out as KubeVirt's types document it.
    """
    kind, _, name = value.rpartition("/")
    default = next(k for k in kinds if "Cluster" in k)
    if kind:
        wanted = kind.lower().removesuffix("s")
        found = [k for k in kinds if k.lower() == wanted]
        if not found:
            raise InvalidInput(f"{flag} {value}: unknown kind {kind!r}; use {' or '.join(k.lower() for k in kinds)} "
                               f"(without a kind: {default.lower()})")
        kind = found[0]
    validate_name(name, kind=(kind or default).lower())
    return kind or default, name


def product_label(value: str) -> str:
    """The rebellions.ai/npu.product label value of a product (`ca22` -> `RBLN-CA22`); InvalidInput if none."""
    wanted = value.strip().upper()
    wanted = wanted if wanted.startswith("RBLN-") else f"RBLN-{wanted}"
    if not _PRODUCT.fullmatch(wanted):
        raise InvalidInput(f"invalid product {value!r}: a product is like RBLN-CA22 (letters, digits, '-', '_' and "
                           "'.', at most 63 characters, as a label value)")
    return wanted


_PRODUCT = re.compile(r"RBLN-[A-Z0-9]([-A-Z0-9_.]{0,56}[A-Z0-9])?", re.ASCII)
_URL_SCHEMES = {"http": "http", "https": "http", "docker": "registry"}  # CDI DataVolumeSource: http, registry


def datavolume_source(value: str, *, namespace: str | None) -> dict:
    """The CDI DataVolume `source` of `--datavolume-source`: `{http: {url}}` for http(s)://, `{registry: {url}}`
    for docker://, else `{pvc: {namespace, name}}` for `[NAMESPACE/]NAME` (the VM's namespace when none is given;
    CDI's DataVolumeSourcePVC requires both, as KubeVirt's OpenAPI says)."""
    text = value.strip()
    scheme, sep, rest = text.partition("://")
    if sep:
        kind = _URL_SCHEMES.get(scheme.lower())
        if kind is None or not rest or any(c.isspace() for c in text):
            raise InvalidInput(f"--datavolume-source {value}: give an http://, https:// or docker:// URL, or a PVC "
                               "as [NAMESPACE/]NAME")
        return {kind: {"url": text}}
    ns, _, name = text.rpartition("/")
    if "." in ns.partition("/")[0]:  # a host name: a URL whose scheme was left out, never a namespace (no dots)
        raise InvalidInput(f"--datavolume-source {value}: {ns.partition('/')[0]} is no namespace (a namespace has no "
                           f"'.'); for a URL give its scheme (https://{text} or docker://{text})")
    ns = ns or namespace or "default"
    validate_namespace(ns, what="--datavolume-source namespace")
    validate_name(name, kind="PersistentVolumeClaim")
    return {"pvc": {"namespace": ns, "name": name}}


def rootdisk_name(vm: str) -> str:
    """The DataVolume (and so the PVC) a VM's --datavolume-source creates."""
    return f"{vm}-rootdisk"


def _root_volume(o: ManifestOptions) -> tuple[dict, list[dict]]:
    """The `rootdisk` volume and the dataVolumeTemplates it needs (CDI's DataVolume shape, as virtctl create vm
    writes it: a `storage` spec, so CDI picks access and volume modes from the storage profile;
    kubevirt/kubevirt@v1.9.0 pkg/virtctl/create/vm/vm.go createDataVolume)."""
    if o.pvc is not None:
        return {"name": "rootdisk", "persistentVolumeClaim": {"claimName": o.pvc}}, []
    if o.datavolume_source is not None:
        name = rootdisk_name(o.name)
        storage: dict = {}
        if o.disk_size:
            storage["resources"] = {"requests": {"storage": o.disk_size}}
        template = {"metadata": {"name": name},
                    "spec": {"source": datavolume_source(o.datavolume_source,
                                                         namespace=o.namespace or o.claim_namespace),
                             "storage": storage}}
        return {"name": "rootdisk", "dataVolume": {"name": name}}, [template]
    return {"name": "rootdisk", "containerDisk": {"image": o.image or C.VM_DEFAULT_IMAGE}}, []


def build_manifest(o: ManifestOptions) -> list[dict]:
    """The objects to apply, in order: the ResourceClaimTemplate (DRA) first, then the VirtualMachine."""
    if o.method == C.METHOD_SANDBOX and not o.resource:
        raise InvalidInput("a sandbox VM names the resource its NPUs come from")
    names = D.free_names([], o.npus)
    objects: list[dict] = []
    root, data_volumes = _root_volume(o)
    domain: dict = {}
    if o.instancetype is None:  # an instancetype sizes the VM: setting cpu or memory too is a conflict
        domain["cpu"] = {"cores": o.cores if o.cores is not None else C.VM_DEFAULT_CORES}
        domain["memory"] = {"guest": o.memory if o.memory is not None else C.VM_DEFAULT_MEMORY}
    domain["devices"] = {
        "disks": [{"name": "rootdisk", "disk": {"bus": "virtio"}},
                  {"name": "cloudinit", "disk": {"bus": "virtio"}}],
        "interfaces": [{"name": "default", "masquerade": {}}],
    }
    spec: dict = {
        "domain": domain,
        "networks": [{"name": "default", "pod": {}}],
        "volumes": [root, {"name": "cloudinit", "cloudInitNoCloud": {"userData": cloud_config(o.user, o.ssh_keys)}}],
    }
    if o.node_product is not None:
        spec["nodeSelector"] = {C.NPU_PRODUCT_LABEL: o.node_product}
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
    vm_spec: dict = {"runStrategy": "Always"}
    if o.instancetype is not None:
        kind, name = o.instancetype.split("/")
        vm_spec["instancetype"] = {"kind": kind, "name": name}
    if o.preference is not None:
        kind, name = o.preference.split("/")
        vm_spec["preference"] = {"kind": kind, "name": name}
    if data_volumes:
        vm_spec["dataVolumeTemplates"] = data_volumes
    vm_spec["template"] = {"metadata": {"labels": {C.VM_NAME_LABEL: o.name}}, "spec": spec}
    objects.append({
        "apiVersion": f"{C.KUBEVIRT_GROUP}/{C.KUBEVIRT_VERSION}", "kind": "VirtualMachine", "metadata": meta,
        "spec": vm_spec,
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
        # Nothing of the text is echoed: it may be a private key's body (without its header) bound for a CI log.
        raise InvalidInput(f"not an OpenSSH public key (a line of {len(key.strip())} characters; expected a key type, "
                           "its base64 and a comment, e.g. `ssh-ed25519 AAAA... you@host`, as in a .pub file)")
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
    warnings: list[str | Remedy] = field(default_factory=list)  # e.g. more NPUs than any vm-passthrough node offers
    refused: bool = False  # KubeVirt's admission will refuse the VM as the cluster is (a warning says why)


def resolve(kube: Kube, *, method: str | None, resource: str | None, product: str | None = None
            ) -> tuple[str, str | None, str]:
    """(method, resource, device class) for a manifest, from the cluster where the caller left them open.

    The rules `vm attach` uses: the policy's method; the only resource vm-mode nodes advertise (or
    the one of `product`); Ambiguous when several fit, NotFound when none does.
    """
    r = resolve_for(kube, method=method, resource=resource, product=product)
    return r.method, r.resource, r.device_class


def resolve_for(kube: Kube, *, method: str | None, resource: str | None, product: str | None = None,
                npus: int | None = None, node_product: str | None = None) -> Resolved:
    """resolve(), and with `npus` the warning `vm attach` gives when such a VM would not be scheduled now
    (rblnctl.vm.fit: one computation for both, and for `vm fit`, placed by the product nodeSelector when there is
    one); with `node_product` (the VM's nodeSelector) the sandbox resource of that product when none was named,
    and a warning when no vm-passthrough node carries it."""
    from rblnctl.vm.cluster import choose_method, pick_resource, read_cluster
    from rblnctl.vm.fit import ANYWHERE, FitOptions, fit
    from rblnctl.vm.placement import Placement

    cluster = read_cluster(kube)
    chosen, _ = choose_method(method, cluster, None)
    refusals, refused = admission_warnings(kube, cluster, chosen)
    product = product or node_product
    if chosen == C.METHOD_SANDBOX and not resource:
        resource = pick_resource(cluster, product=product)
        if resource is None:
            what = f"a resource for {product}" if product else "a VM resource"
            missing = NotFound(f"no vm-passthrough node advertises {what}; name the resource to write into the "
                               "manifest")
            missing.options = ("resource",)  # the front end names the flag (rblnctl.cli.errors: `pass --resource`)
            raise missing
    resource = resource if chosen == C.METHOD_SANDBOX else None
    warnings: list[str | Remedy] = list(refusals)
    if npus is not None:
        placement = ANYWHERE if node_product is None else Placement(
            node_selector={C.NPU_PRODUCT_LABEL: product_label(node_product)}, terms=(), tolerations=())
        answer = fit(kube, FitOptions(npus=npus, method=chosen, resource=resource, placement=placement),
                     cluster=cluster)
        if answer.shared:  # container-mode nodes advertise it too: the scheduler may use them
            warnings.append(answer.shared)
        warning = answer.warning()
        if warning:
            warnings.append(warning)
    if node_product is not None:
        unlabelled = product_unlabelled(cluster.nodes, cluster.vm_nodes, product_label(node_product), chosen)
        if unlabelled:
            warnings.append(unlabelled)
    return Resolved(method=chosen, resource=resource, device_class=cluster.device_class, warnings=warnings,
                    refused=refused)


# A manifest whose every choice was given reads the cluster only for its warnings: one try per read, and no longer
# than this each (a kubeconfig whose server cannot be reached must not stall a manifest written for git).
ADVISORY_TIMEOUT_S = 5.0


def advisory(kube: Kube) -> Kube:
    """The same connection for reads that only warn: never retried, ADVISORY_TIMEOUT_S at most each."""
    return kube.one_try(ADVISORY_TIMEOUT_S)


def admission_warnings(kube: Kube, cluster: VmCluster, method: str) -> tuple[list[str | Remedy], bool]:
    """(what will stop a VM of this manifest, whether KubeVirt's admission refuses it), read from the cluster (the
    checks `vm attach` refuses on,
    rblnctl.vm.cluster): KubeVirt's admission refuses it while HostDevices (and for DRA HostDevicesWithDRA) is
    off ("Host Devices feature gate is not enabled in kubevirt-config": kubevirt/kubevirt@v1.9.0
    pkg/virt-api/webhooks/validating-webhook/admitters/vmi-create-admitter.go), and a DRA VM whose DeviceClass
    does not exist is admitted but its virt-launcher pod is never scheduled (no device of that class can be
    allocated; the operator creates the class while draKubeletPlugin is enabled)."""
    from rblnctl.vm.cluster import check_device_class, check_gates, with_dra

    out: list[str | Remedy] = []
    gates = check_gates(cluster, method)
    if not gates.ok:
        fix = gates.remedy
        if fix is None:
            out.append(f"KubeVirt will refuse this VM: {gates.message}")
        else:
            place = " ({command})" if fix.command is not None else ""
            out.append(Remedy(f"KubeVirt will refuse this VM: {gates.message}; {fix.text}{place} before applying it",
                              fix.command))
    if method == C.METHOD_DRA:
        dc = check_device_class(with_dra(kube, cluster))
        if not dc.ok:
            out.append(f"{dc.message}: KubeVirt admits the VM, but its virt-launcher pod stays Pending (no device of "
                       f"that class can be allocated); {dc.remedy.text if dc.remedy else ''}")
    return out, not gates.ok


def manifest_notes(o: ManifestOptions, objects: Sequence[dict], *, refused: bool | None) -> list[str]:
    """What a DRA manifest's reader must know: without a namespace, the namespace its pod-level claim name was
    derived from (rblnctl.vm.devices.claim_name hashes namespace/name, so the manifest belongs in that namespace);
    and, when KubeVirt will refuse the VM (`refused`) or that is unknown (None: the cluster was not read), how to
    remove the template a refused VM leaves (orphan_note)."""
    if o.method != C.METHOD_DRA:
        return []
    out = []
    if o.namespace is None:
        ns = o.claim_namespace or "default"
        out.append(f"the pod-level claim name {D.claim_name(ns, o.name)} in this VM is derived from namespace {ns} "
                   "(where kubectl apply puts it without -n): apply it there only; for another namespace write it "
                   "again with -n NAMESPACE (each VM needs a claim name of its own on a node)")
    note = orphan_note(objects) if refused is not False else None
    if note:
        out.append(note)
    return out


def orphan_note(objects: Sequence[dict]) -> str | None:
    """What to do with the ResourceClaimTemplate of a DRA manifest when KubeVirt refuses its VM (None: no template).

    `kubectl apply` sends a List's items in order and goes on after an item is refused (kubernetes/kubectl
    pkg/cmd/apply/apply.go Run: each object's error is collected, the next one applied), so no order of the two
    leaves nothing behind when the VM is refused, and the template cannot be owned by a VM not yet created (an
    ownerReference needs its uid). The template comes first so the launcher pod finds it; when the VM is refused
    it is left, labelled app.kubernetes.io/managed-by=rblnctl, holding nothing: this says how to remove it."""
    for o in objects:
        if o.get("kind") == "ResourceClaimTemplate":
            meta = o.get("metadata") or {}
            ns = f" -n {meta['namespace']}" if meta.get("namespace") else ""
            return (f"kubectl applies ResourceClaimTemplate {meta.get('name')} before the VirtualMachine; if KubeVirt "
                    f"refuses the VM, the template stays behind (it holds no NPU): `kubectl delete "
                    f"resourceclaimtemplate {meta.get('name')}{ns}`")
    return None


def product_unlabelled(nodes: Sequence[dict], vm_nodes: Sequence[str], product: str, method: str) -> str | None:
    """The warning for a product nodeSelector no vm-passthrough node matches (None: one does).

    NPU feature discovery writes rebellions.ai/npu.product, and it runs in container mode only: its labels are an
    NFD local feature file that expires an hour after it was last written (RBLN-SW/rbln-npu-feature-discovery
    internal/collector/collector.go save: `# +expiry-time`; kubernetes-sigs/node-feature-discovery v0.17.3
    source/local/local.go drops expired files), so a vm-passthrough node usually has no such label.
    """
    labelled = sorted(name for n in nodes if (name := str((n.get("metadata") or {}).get("name") or "")) in vm_nodes
                      and ((n.get("metadata") or {}).get("labels") or {}).get(C.NPU_PRODUCT_LABEL) == product)
    if labelled:
        return None
    hint = ("; without --node-product the sandbox resource alone picks the product (--product)"
            if method == C.METHOD_SANDBOX else "")
    return (f"no vm-passthrough node is labelled {C.NPU_PRODUCT_LABEL}={product}, so the VM will not be scheduled "
            "until one is: NPU feature discovery, which writes that label, runs in container mode only and its labels "
            f"expire an hour after it stops{hint}")
