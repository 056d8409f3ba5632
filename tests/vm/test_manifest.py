"""vm manifest (library): a complete VirtualMachine with its NPUs, and for DRA its ResourceClaimTemplate."""

from __future__ import annotations

import pytest
from kubernetes import client

from rblnctl.errors import Ambiguous, InvalidInput, NotFound
from rblnctl.vm import devices as D
from tests.fakes import objects as o
from rblnctl.vm.manifest import ManifestOptions, build_manifest, resolve, resolve_for
from tests.vm.support import CA22, CA25, NS, VFIO_CLASS, dra_cluster, sandbox_cluster


def test_sandbox_manifest():
    (vm,) = build_manifest(ManifestOptions(name="v1", namespace=NS, npus=2, resource=CA22))
    assert (vm["apiVersion"], vm["kind"], vm["metadata"]) == ("kubevirt.io/v1", "VirtualMachine",
                                                              {"name": "v1", "namespace": NS})
    spec = vm["spec"]["template"]["spec"]
    assert vm["spec"]["runStrategy"] == "Always"
    assert spec["domain"]["devices"]["hostDevices"] == [{"name": "npu0", "deviceName": CA22},
                                                        {"name": "npu1", "deviceName": CA22}]
    volumes = {v["name"] for v in spec["volumes"]}
    disks = {d["name"] for d in spec["domain"]["devices"]["disks"]}
    assert volumes == disks == {"rootdisk", "cloudinit"}
    assert {n["name"] for n in spec["networks"]} == {i["name"] for i in spec["domain"]["devices"]["interfaces"]}
    assert D.npus_of(spec).count == 2 and "resourceClaims" not in spec


def test_dra_manifest_names_its_template_and_requests():
    tpl, vm = build_manifest(ManifestOptions(name="v1", npus=2, method="dra"))
    client.V1ResourceClaimTemplate.from_dict(tpl)
    spec = vm["spec"]["template"]["spec"]
    assert "namespace" not in vm["metadata"] and "namespace" not in tpl["metadata"]
    (entry,) = spec["resourceClaims"]
    # the claim name of VM default/v1: no -n, so the namespace `kubectl apply` uses when the context names none
    assert entry == {"name": o.vm_claim("default", "v1"), "resourceClaimTemplateName": tpl["metadata"]["name"]}
    requests = {r["name"] for r in tpl["spec"]["spec"]["devices"]["requests"]}
    devices = spec["domain"]["devices"]["hostDevices"]
    assert all(d["claimName"] == entry["name"] and "deviceName" not in d for d in devices)
    assert {d["requestName"] for d in devices} == requests == {"npu0", "npu1"}  # one device per request


@pytest.mark.parametrize("kwargs", [{"name": "Bad_Name"}, {"name": "v1", "npus": 0}, {"name": "v1", "method": "x"},
                                    {"name": "v1", "image": "has space"}])
def test_bad_options(kwargs):
    with pytest.raises(InvalidInput):
        ManifestOptions(**kwargs)


def test_sandbox_needs_a_resource():
    with pytest.raises(InvalidInput):
        build_manifest(ManifestOptions(name="v1"))


def test_resolve_from_the_cluster(apiserver, kube):
    sandbox_cluster(apiserver)
    assert resolve(kube, method=None, resource=None) == ("sandbox", CA22, VFIO_CLASS)


def test_resolve_dra_from_the_policy(apiserver, kube):
    dra_cluster(apiserver)
    assert resolve(kube, method=None, resource=None) == ("dra", None, VFIO_CLASS)


def test_resolve_refuses_to_guess(apiserver, kube):
    sandbox_cluster(apiserver, vm_nodes={"n1": "RBLN-CA22", "n2": "RBLN-CA25"})
    with pytest.raises(Ambiguous):
        resolve(kube, method=None, resource=None)
    assert resolve(kube, method="sandbox", resource=None, product="RBLN-CA25")[1] == CA25
    with pytest.raises(NotFound):
        resolve(kube, method="sandbox", resource=None, product="RBLN-CR03")


# -- size, instancetype, root disk, node selector ----------------------------------------------------------------

def _vm(**kwargs):
    return build_manifest(ManifestOptions(name="v1", namespace=NS, resource=CA22, **kwargs))[-1]


def _domain(vm):
    return vm["spec"]["template"]["spec"]["domain"]


def test_cpu_and_memory_size_the_domain_and_default_to_4_and_8gi():
    assert (_domain(_vm())["cpu"], _domain(_vm())["memory"]) == ({"cores": 4}, {"guest": "8Gi"})
    domain = _domain(_vm(cores=16, memory="64Gi"))
    assert (domain["cpu"], domain["memory"]) == ({"cores": 16}, {"guest": "64Gi"})


# The VM fields KubeVirt v1.9.0 refuses beside an instancetype (pkg/instancetype/apply/cpu.go validateCPU,
# memory.go validateMemory): the template may set none of them.
INSTANCETYPE_CONFLICTS = [("cpu", "cores"), ("cpu", "sockets"), ("cpu", "threads"), ("memory", "guest"),
                          ("resources", "requests", "cpu"), ("resources", "limits", "cpu"),
                          ("resources", "requests", "memory"), ("resources", "limits", "memory")]


def test_an_instancetype_sizes_the_vm_so_the_domain_sets_no_cpu_or_memory():
    vm = _vm(instancetype="u1.xlarge", preference="ubuntu")
    assert vm["spec"]["instancetype"] == {"kind": "VirtualMachineClusterInstancetype", "name": "u1.xlarge"}
    assert vm["spec"]["preference"] == {"kind": "VirtualMachineClusterPreference", "name": "ubuntu"}
    for path in INSTANCETYPE_CONFLICTS:
        node = _domain(vm)
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        assert node is None, path
    assert _domain(vm)["devices"]["hostDevices"] == [{"name": "npu0", "deviceName": CA22}]


def test_a_preference_alone_keeps_the_size():
    vm = _vm(preference="virtualmachinepreference/ubuntu")
    assert vm["spec"]["preference"] == {"kind": "VirtualMachinePreference", "name": "ubuntu"}
    assert "instancetype" not in vm["spec"] and _domain(vm)["cpu"] == {"cores": 4}


@pytest.mark.parametrize(("value", "kind"), [
    ("npu-large", "VirtualMachineClusterInstancetype"),
    ("virtualmachineinstancetype/npu-large", "VirtualMachineInstancetype"),
    ("VirtualMachineInstancetypes/npu-large", "VirtualMachineInstancetype"),
    ("virtualmachineclusterinstancetype/npu-large", "VirtualMachineClusterInstancetype"),
])
def test_instancetype_kinds_as_virtctl_reads_them(value, kind):
    assert _vm(instancetype=value)["spec"]["instancetype"] == {"kind": kind, "name": "npu-large"}


@pytest.mark.parametrize("kwargs", [
    {"instancetype": "u1", "cores": 2}, {"instancetype": "u1", "memory": "4Gi"},
    {"instancetype": "virtualmachinepreference/u1"}, {"preference": "virtualmachineinstancetype/p"},
    {"instancetype": "Bad_Name"}, {"cores": 0}, {"memory": "8GB"}, {"memory": "0"},
    {"image": "x", "pvc": "p"}, {"pvc": "p", "datavolume_source": "q"}, {"image": "x", "datavolume_source": "q"},
    {"pvc": "other/p"}, {"pvc": "Bad_Name"}, {"disk_size": "10Gi"}, {"datavolume_source": "https://x/y.img"},
    {"datavolume_source": "ftp://x/y.img", "disk_size": "1Gi"}, {"datavolume_source": "a/b/c"},
    {"datavolume_source": "q", "disk_size": "-1Gi"}, {"node_product": "RBLN-CA22!"},
    {"node_product": "x" * 70}, {"name": "v" * 250, "datavolume_source": "q"},
])
def test_bad_combinations_are_bad_input(kwargs):
    with pytest.raises(InvalidInput):
        ManifestOptions(**{"name": "v1", **kwargs})


def test_root_disk_from_a_pvc():
    vm = _vm(pvc="my-root")
    assert vm["spec"]["template"]["spec"]["volumes"][0] == {"name": "rootdisk",
                                                            "persistentVolumeClaim": {"claimName": "my-root"}}
    assert "dataVolumeTemplates" not in vm["spec"]


@pytest.mark.parametrize(("source", "size", "expected"), [
    ("https://example.com/jammy.img", "40Gi", {"http": {"url": "https://example.com/jammy.img"}}),
    ("http://10.0.0.1/x.qcow2", "1Gi", {"http": {"url": "http://10.0.0.1/x.qcow2"}}),
    ("docker://quay.io/containerdisks/ubuntu:24.04", "20Gi",
     {"registry": {"url": "docker://quay.io/containerdisks/ubuntu:24.04"}}),
    ("golden/ubuntu", None, {"pvc": {"namespace": "golden", "name": "ubuntu"}}),
    ("ubuntu", "30Gi", {"pvc": {"namespace": NS, "name": "ubuntu"}}),  # the VM's namespace
])
def test_root_disk_from_a_datavolume(source, size, expected):
    vm = _vm(datavolume_source=source, disk_size=size)
    (template,) = vm["spec"]["dataVolumeTemplates"]
    storage = {"resources": {"requests": {"storage": size}}} if size else {}
    assert template == {"metadata": {"name": "v1-rootdisk"}, "spec": {"source": expected, "storage": storage}}
    volumes = vm["spec"]["template"]["spec"]["volumes"]
    assert volumes[0] == {"name": "rootdisk", "dataVolume": {"name": "v1-rootdisk"}}
    assert [d["name"] for d in _domain(vm)["devices"]["disks"]] == ["rootdisk", "cloudinit"]


def test_a_pvc_source_without_namespace_is_where_kubectl_applies_the_vm():
    """No -n: the namespace `kubectl apply` would use (the context's, else default), as for the claim name."""
    (vm,) = build_manifest(ManifestOptions(name="v1", claim_namespace="team", resource=CA22,
                                           datavolume_source="golden"))
    assert vm["spec"]["dataVolumeTemplates"][0]["spec"]["source"] == {"pvc": {"namespace": "team", "name": "golden"}}
    (vm,) = build_manifest(ManifestOptions(name="v1", resource=CA22, datavolume_source="golden"))
    assert vm["spec"]["dataVolumeTemplates"][0]["spec"]["source"]["pvc"]["namespace"] == "default"


def test_the_container_disk_stays_the_default():
    assert _vm()["spec"]["template"]["spec"]["volumes"][0] == {
        "name": "rootdisk", "containerDisk": {"image": "quay.io/containerdisks/ubuntu:24.04"}}
    assert _vm(image="registry/x:1")["spec"]["template"]["spec"]["volumes"][0]["containerDisk"] == {
        "image": "registry/x:1"}


@pytest.mark.parametrize("method", ["sandbox", "dra"])
def test_node_product_is_a_node_selector_on_the_product_label(method):
    vm = build_manifest(ManifestOptions(name="v1", method=method, resource=CA22 if method == "sandbox" else None,
                                        node_product="ca25"))[-1]
    assert vm["spec"]["template"]["spec"]["nodeSelector"] == {"rebellions.ai/npu.product": "RBLN-CA25"}
    assert "nodeSelector" not in _vm()["spec"]["template"]["spec"]


def test_node_product_picks_the_resource_and_warns_when_no_vm_node_carries_the_label(apiserver, kube):
    """vm-passthrough nodes usually have no npu.product label (NPU feature discovery is container-only)."""
    sandbox_cluster(apiserver, vm_nodes={"n1": "RBLN-CA22", "n2": "RBLN-CA25"})
    found = resolve_for(kube, method=None, resource=None, node_product="RBLN-CA25")
    assert found.resource == CA25
    (warning,) = found.warnings
    assert "no vm-passthrough node is labelled rebellions.ai/npu.product=RBLN-CA25" in warning
    apiserver.mutate("Node", "n2", fn=lambda n: n["metadata"]["labels"].update(
        {"rebellions.ai/npu.product": "RBLN-CA25"}))
    assert resolve_for(kube, method=None, resource=None, node_product="ca25").warnings == []
    # a container-mode node carrying the label does not count: it offers no NPU to a VM
    assert resolve_for(kube, method=None, resource=None, product="RBLN-CA22",
                       node_product="RBLN-CA22").warnings != []


@pytest.mark.parametrize("source", ["cloud-images.ubuntu.com/noble.img", "example.com/jammy-server.qcow2",
                                    "quay.io/containerdisks"])
def test_a_url_without_its_scheme_is_not_taken_for_a_pvc(source):
    """`--datavolume-source cloud-images.ubuntu.com/noble.img` (https:// forgotten): before, a clone of PVC noble.img
    from namespace cloud-images.ubuntu.com, which no cluster can have (a namespace is a DNS label: no dots), and the
    DataVolume waited for it forever. Now bad input, naming the schemes."""
    with pytest.raises(InvalidInput, match=r"https://.*docker://|namespace"):
        ManifestOptions(name="v1", resource=CA22, datavolume_source=source, disk_size="20Gi")


@pytest.mark.parametrize("namespace", ["team.a", "n" * 64])
def test_a_namespace_is_a_dns_label(namespace):
    """kube-apiserver's ValidateNamespaceName is a DNS-1123 label (at most 63, no dots): a manifest for `-n team.a`
    could never be applied."""
    with pytest.raises(InvalidInput, match="namespace"):
        ManifestOptions(name="v1", namespace=namespace, resource=CA22)


@pytest.mark.parametrize("cores", [2**32, 10**20])
def test_more_cpus_than_kubevirts_uint32_is_bad_input(cores):
    """domain.cpu.cores is a uint32 in KubeVirt's API (kubevirt.io/api core/v1 schema.go CPU.Cores): a manifest with
    more cannot be decoded by virt-api. Before: written as asked (exit 0)."""
    with pytest.raises(InvalidInput, match="--cpu"):
        ManifestOptions(name="v1", resource=CA22, cores=cores)
    ManifestOptions(name="v1", resource=CA22, cores=2**32 - 1)
