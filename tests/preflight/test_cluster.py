"""Cluster checks on the fake API server: a healthy cluster per method, then each FAIL and WARN, RBAC, scale.

The fake has no Deployment builder, so `operator_deployment` is here; `nfd_features` extends the
fake's NodeFeature with the flag features newer NFD publishes (kernel.enabledmodule, cpu.cpuid).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rblnctl.errors import ClusterUnreachable, InvalidInput
from rblnctl.kube import KubeOptions, connect
from rblnctl.preflight.cluster import ClusterPreflight, Fetch, choose_method, find_operator
from rblnctl.preflight.model import Status, group_checks
from tests.fakes import objects as o
from tests.fakes.clock import FakeClock
from tests.helpers import closed_port_url

VM = "vm-passthrough"
CA22_PF = "rebellions.ai/RBLN-CA22_PF"
CLUSTER_IDS = [
    "cluster.method", "kubernetes.version", "operator.version", "operator.policy", "kubevirt.installed",
    "kubevirt.version", "kubevirt.gates", "kubevirt.permitted-devices", "dra.driver", "dra.deviceclass",
    "helm.version", "nfd.installed", "nfd.npu-nodes", "nodes.vm-mode",
]
NODE_IDS = ["node.iommu", "node.vfio-modules", "node.viommu", "node.mode-label", "node.deploy-skip"]


# -- builders ------------------------------------------------------------------------------------


def operator_deployment(version: str | None = "0.6.0", *, namespace: str = "rbln-system",
                        name: str = "rbln-npu-operator", labels: dict | None = None, image: str | None = None) -> dict:
    """The operator's Deployment as its Helm chart labels it (the fake has no Deployment builder)."""
    lbl = {"app.kubernetes.io/name": "rbln-npu-operator", "app.kubernetes.io/instance": "rbln-npu-operator",
           "app.kubernetes.io/managed-by": "Helm"}
    if version:
        lbl |= {"app.kubernetes.io/version": version, "helm.sh/chart": f"rbln-npu-operator-{version}"}
    if labels is not None:
        lbl = labels
    image = image or f"docker.io/rebellions/rbln-npu-operator:{'v' + version if version else 'latest'}"
    sel = {"app.kubernetes.io/component": "operator"}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": lbl},
        "spec": {"replicas": 1, "selector": {"matchLabels": sel},
                 "template": {"metadata": {"labels": sel},
                              "spec": {"containers": [{"name": "manager", "image": image}]}}},
        "status": {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1, "observedGeneration": 1},
    }


def dra_daemonset(version: str = "v0.2.1", *, desired: int = 3, ready: int | None = None) -> dict:
    return o.daemonset("rbln-system", "rbln-dra-kubelet-plugin", desired=desired, ready=ready,
                       image=f"docker.io/rebellions/rbln-k8s-dra-driver:{version}",
                       node_selector={"rebellions.ai/npu.deploy.dra-kubelet-plugin": "true"})


def nfd_features(node: str, *, hypervisor: bool = False, enabled_modules: tuple[str, ...] | None = None,
                 **kw) -> dict:
    """o.node_feature plus the flag features of NFD >= v0.14 (kernel.enabledmodule, cpu.cpuid)."""
    nf = o.node_feature(node, **kw)
    mods = kw.get("modules", ("rebellions", "vfio", "vfio_pci", "vfio_iommu_type1", "kvm", "kvm_intel"))
    cpuid = ["AVX", "AVX2", "AVX512F", "VMX"] + (["HYPERVISOR"] if hypervisor else [])
    nf["spec"]["features"]["flags"] = {
        "cpu.cpuid": {"elements": {f: {} for f in cpuid}},
        "kernel.enabledmodule": {"elements": {m: {} for m in (enabled_modules if enabled_modules is not None
                                                               else mods)}},
    }
    return nf


def seed(apiserver, *, method: str = "sandbox", nodes: int = 3, mode: str | None = VM, policy: dict | None = None,
         kubevirt: dict | None = None, operator: dict | None = None, features: bool = True,
         prefix: str = "npu-") -> list[str]:
    """A cluster ready for `method` with `nodes` NPU nodes; every part can be replaced. Returns node names."""
    dra = method == "dra"
    names = [f"{prefix}{i:04d}" for i in range(nodes)]
    objs: list[dict] = [
        policy or o.cluster_policy(workload_type="container", vfio_manager=True, sandbox=not dra, dra=dra,
                                   device_plugin=not dra),
        operator or operator_deployment("0.6.0"),
        kubevirt or o.kubevirt(feature_gates=["HostDevices", "HostDevicesWithDRA"] if dra else ["HostDevices"],
                               version="v1.9.0",
                               permitted_pci=None if dra else [("1EFF:1220", CA22_PF)]),
    ]
    if dra:
        objs += [dra_daemonset(desired=nodes), o.deviceclass("vfio-npu.rebellions.ai"),
                 o.deviceclass("npu.rebellions.ai")]
    for n in names:
        objs.append(o.npu_node(n, mode=mode, dra=dra))
        if features:
            objs.append(nfd_features(n))
    apiserver.add(*objs)
    return names


@pytest.fixture
def kube(apiserver):
    return connect(KubeOptions(server=apiserver.url))


@pytest.fixture(autouse=True)
def no_helm(tmp_path, monkeypatch):
    """PATH holds only a temp bin dir: helm is absent unless a test writes one there."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


def fake_helm(bin_dir: Path, output: str, code: int = 0) -> None:
    helm = bin_dir / "helm"
    helm.write_text(f"#!/bin/sh\necho '{output}'\nexit {code}\n")
    helm.chmod(0o755)


def run(kube, **kw):
    return ClusterPreflight(kube=kube, **kw).run()


def cluster(report) -> dict:
    return {c.id: c for c in report.checks if c.scope == "cluster"}


def per_node(report, id_: str) -> dict:
    return {c.scope: c for c in report.checks if c.id == id_}


def problems(report) -> list[tuple[str, str, str]]:
    return [(c.id, c.scope, c.status.value) for c in report.checks if c.status in (Status.WARN, Status.FAIL)]


# -- healthy clusters ----------------------------------------------------------------------------


def test_healthy_sandbox_cluster(apiserver, kube):
    names = seed(apiserver, method="sandbox")
    report = run(kube)
    assert problems(report) == []
    assert report.method == "sandbox" and report.summary.ok and report.nodes == 3
    assert [c.id for c in report.checks if c.scope == "cluster"] == CLUSTER_IDS
    c = cluster(report)
    assert c["cluster.method"].evidence.startswith("sandbox: auto: RBLNClusterPolicy rbln-cluster-policy enables "
                                                   "sandboxDevicePlugin")
    assert c["operator.version"].evidence == ("rbln-system/rbln-npu-operator 0.6.0 >= 0.4.4 (from label "
                                              "app.kubernetes.io/version)")
    assert c["dra.driver"].status == Status.SKIP and c["helm.version"].status == Status.SKIP
    assert CA22_PF in c["kubevirt.permitted-devices"].evidence
    for id_ in NODE_IDS:
        assert set(per_node(report, id_)) == set(names)
    # identical per-node results collapse to one group per check
    groups = group_checks(c for c in report.checks if c.scope not in ("cluster", "host"))
    assert [(g.id, g.status, len(g.scopes)) for g in groups] == [(i, Status.PASS, 3) for i in NODE_IDS]


def test_healthy_dra_cluster(apiserver, kube):
    seed(apiserver, method="dra")
    report = run(kube)
    assert problems(report) == []
    c = cluster(report)
    assert report.method == "dra" and "enables draKubeletPlugin" in c["cluster.method"].evidence
    assert c["dra.driver"].status == Status.PASS and "v0.2.1 >= 0.2.1" in c["dra.driver"].evidence
    assert c["dra.deviceclass"].status == Status.PASS
    assert c["kubevirt.permitted-devices"].status == Status.SKIP
    assert "HostDevicesWithDRA: in featureGates" in c["kubevirt.gates"].evidence


# -- method selection ----------------------------------------------------------------------------


def test_method_auto_without_any_plugin_falls_back_to_sandbox_with_warning(apiserver, kube):
    seed(apiserver, policy=o.cluster_policy(sandbox=False, dra=False))
    report = run(kube)
    c = cluster(report)
    assert report.method == "sandbox"
    assert c["cluster.method"].status == Status.WARN and "neither" in c["cluster.method"].evidence
    assert c["operator.policy"].status == Status.FAIL


def test_method_flag_overrides_policy(apiserver, kube):
    seed(apiserver, method="sandbox")
    report = run(kube, method="dra")
    c = cluster(report)
    assert report.method == "dra" and c["cluster.method"].evidence == "dra: --method dra"
    assert c["operator.policy"].status == Status.FAIL
    assert "draKubeletPlugin is disabled but the dra method needs it" in c["operator.policy"].evidence
    assert c["dra.driver"].status == Status.FAIL and c["dra.deviceclass"].status == Status.FAIL


def test_choose_method_pure():
    def policies(**kw):
        return Fetch(verb="list", resource="rblnclusterpolicies.rebellions.ai", value=[o.cluster_policy(**kw)])

    assert choose_method("auto", policies(dra=True, sandbox=False))[0] == "dra"
    assert choose_method("auto", policies(dra=False, sandbox=True))[0] == "sandbox"
    assert choose_method("auto", policies(dra=False, sandbox=False))[2] == Status.WARN
    absent = Fetch(verb="list", resource="rblnclusterpolicies.rebellions.ai", absent=True)
    assert choose_method("auto", absent)[:3] == ("sandbox", "auto: no RBLNClusterPolicy CRD, so checking the "
                                                 "sandbox method", Status.WARN)
    assert choose_method("sandbox", absent)[2] == Status.PASS


def test_invalid_options(kube):
    with pytest.raises(InvalidInput, match="unknown method 'vfio'"):
        ClusterPreflight(kube=kube, method="vfio")
    with pytest.raises(InvalidInput, match="give --node or --selector, not both"):
        ClusterPreflight(kube=kube, node="n1", selector="a=b")


# -- Kubernetes, KubeVirt ------------------------------------------------------------------------


def test_old_kubernetes_for_dra(apiserver, kube):
    seed(apiserver, method="dra")
    apiserver.set_version("v1.33.2")
    c = cluster(run(kube))
    k = c["kubernetes.version"]
    assert k.status == Status.FAIL and k.evidence == "v1.33.2 < 1.34.0, the dra method's floor"
    assert "sandbox method" in k.remedy


def test_kubernetes_floor_for_sandbox(apiserver, kube):
    seed(apiserver)
    apiserver.set_version("v1.18.20")
    assert cluster(run(kube))["kubernetes.version"].status == Status.FAIL
    apiserver.set_version("v1.19.0")
    assert cluster(run(kube))["kubernetes.version"].status == Status.PASS


def test_kubevirt_crd_missing(apiserver, kube):
    seed(apiserver)
    apiserver.remove_resource("kubevirts.kubevirt.io")
    c = cluster(run(kube))
    assert c["kubevirt.installed"].status == Status.FAIL
    assert "CRD is not installed" in c["kubevirt.installed"].evidence and "kubevirt-operator.yaml" in \
        c["kubevirt.installed"].remedy
    assert [c[i].status for i in ("kubevirt.version", "kubevirt.gates", "kubevirt.permitted-devices")] == \
        [Status.SKIP] * 3


def test_kubevirt_not_deployed(apiserver, kube):
    seed(apiserver, kubevirt=o.kubevirt(feature_gates=["HostDevices"], phase="Deploying",
                                        permitted_pci=[("1EFF:1220", CA22_PF)]))
    c = cluster(run(kube))
    assert c["kubevirt.installed"].status == Status.FAIL and "phase Deploying" in c["kubevirt.installed"].evidence
    assert c["kubevirt.version"].status == Status.WARN  # observedKubeVirtVersion is unset until Deployed


def test_kubevirt_too_old_for_dra(apiserver, kube):
    seed(apiserver, method="dra", kubevirt=o.kubevirt(feature_gates=["HostDevices"], version="v1.8.2"))
    c = cluster(run(kube))
    assert c["kubevirt.version"].status == Status.FAIL and "v1.8.2 < 1.9.0" in c["kubevirt.version"].evidence
    gates = c["kubevirt.gates"]
    assert gates.status == Status.FAIL and "Alpha" in gates.evidence  # HostDevicesWithDRA off before 1.9
    assert "`rblnctl kubevirt enable-gates --dra`" in gates.remedy


def test_gates_missing(apiserver, kube):
    seed(apiserver, kubevirt=o.kubevirt(feature_gates=[], permitted_pci=[("1EFF:1220", CA22_PF)]))
    gates = cluster(run(kube))["kubevirt.gates"]
    assert gates.status == Status.FAIL and "HostDevices: not listed" in gates.evidence
    assert gates.remedy.startswith("`rblnctl kubevirt enable-gates`")


def test_dra_gate_disabled(apiserver, kube):
    seed(apiserver, method="dra", kubevirt=o.kubevirt(feature_gates=["HostDevices"],
                                                      disabled_gates=["HostDevicesWithDRA"]))
    gates = cluster(run(kube))["kubevirt.gates"]
    assert gates.status == Status.FAIL and "HostDevicesWithDRA: in disabledFeatureGates" in gates.evidence


def test_dra_gate_unlisted_on_beta_release_warns(apiserver, kube):
    seed(apiserver, method="dra", kubevirt=o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0"))
    gates = cluster(run(kube))["kubevirt.gates"]
    assert gates.status == Status.WARN and "on by default since KubeVirt 1.9.0" in gates.evidence


def test_permitted_host_devices_missing(apiserver, kube):
    seed(apiserver, kubevirt=o.kubevirt(feature_gates=["HostDevices"]))
    p = cluster(run(kube))["kubevirt.permitted-devices"]
    assert p.status == Status.FAIL
    assert f"advertised but not permitted: {CA22_PF} (3 nodes)" in p.evidence
    assert p.remedy == "`rblnctl kubevirt permit-devices --from-cluster`"


def test_permitted_host_devices_without_external_provider(apiserver, kube):
    entry = {"pciVendorSelector": "1EFF:1220", "resourceName": CA22_PF, "externalResourceProvider": False}
    seed(apiserver, kubevirt=o.kubevirt(feature_gates=["HostDevices"], permitted_pci=[entry]))
    p = cluster(run(kube))["kubevirt.permitted-devices"]
    assert p.status == Status.FAIL and "externalResourceProvider is not true" in p.evidence
    assert "--fix" in p.remedy


def test_permitted_host_devices_none_and_nothing_advertised_warns(apiserver, kube):
    seed(apiserver, mode="container", kubevirt=o.kubevirt(feature_gates=["HostDevices"]))
    report = run(kube)
    c = cluster(report)
    assert c["kubevirt.permitted-devices"].status == Status.WARN
    assert c["nodes.vm-mode"].status == Status.WARN and "none of 3" in c["nodes.vm-mode"].evidence


# -- operator and policy -------------------------------------------------------------------------


def test_operator_missing(apiserver, kube):
    seed(apiserver)
    apiserver.delete_now("Deployment", "rbln-npu-operator", "rbln-system")
    apiserver.remove_resource("rblnclusterpolicies.rebellions.ai")
    report = run(kube)
    c = cluster(report)
    assert c["operator.version"].status == Status.FAIL and "helm upgrade --install" in c["operator.version"].remedy
    assert c["operator.policy"].status == Status.SKIP
    assert c["cluster.method"].status == Status.WARN and report.method == "sandbox"


def test_operator_below_the_documented_minimum_but_supported_warns(apiserver, kube):
    seed(apiserver, operator=operator_deployment("0.4.0"))
    op = cluster(run(kube))["operator.version"]
    assert op.status == Status.WARN and "0.4.0 < 0.4.4" in op.evidence and "supports releases from 0.3.0" in op.evidence


def test_operator_older_than_rblnctl_supports(apiserver, kube):
    seed(apiserver, operator=operator_deployment("0.2.2"))
    op = cluster(run(kube))["operator.version"]
    assert op.status == Status.FAIL and "0.2.2 < 0.4.4" in op.evidence


def test_operator_too_old_for_dra_only(apiserver, kube):
    seed(apiserver, method="dra", operator=operator_deployment("0.5.2"))
    op = cluster(run(kube))["operator.version"]
    assert op.status == Status.FAIL and "0.5.2 < 0.6.0, the dra method's floor" in op.evidence


def test_operator_version_unknown_is_a_warning(apiserver, kube):
    seed(apiserver, operator=operator_deployment(None))
    op = cluster(run(kube))["operator.version"]
    assert op.status == Status.WARN and "version unknown" in op.evidence


def test_operator_found_by_chart_label_and_image_tag(apiserver, kube):
    dep = operator_deployment(None, name="npu-operator", labels={"helm.sh/chart": "rbln-npu-operator-0.5.1"},
                              image="registry.local/rebellions/rbln-npu-operator:v0.5.1")
    seed(apiserver, operator=dep)
    op = cluster(run(kube))["operator.version"]
    assert op.status == Status.PASS and "0.5.1" in op.evidence and "helm.sh/chart" in op.evidence
    dep2 = operator_deployment(None, name="rbln-npu-operator-controller", labels={},
                               image="registry.local/rebellions/rbln-npu-operator:v0.4.1")
    apiserver.delete_now("Deployment", "npu-operator", "rbln-system")
    apiserver.add(dep2)
    op = cluster(run(kube))["operator.version"]
    assert op.status == Status.WARN and "0.4.1" in op.evidence and "from image" in op.evidence


def test_find_operator_uses_one_request_when_labelled(apiserver, kube):
    seed(apiserver, nodes=1)
    apiserver.clear_requests()
    found = find_operator(kube)
    assert found.ok and len(found.value) == 1 and len(apiserver.requests) == 1
    assert apiserver.requests[0].query["labelSelector"] == ["app.kubernetes.io/name=rbln-npu-operator"]


@pytest.mark.parametrize("policy, fragment", [
    (o.cluster_policy(workload_type=VM, vfio_manager=False),
     "vfioManager is disabled (workloadType is vm-passthrough)"),
    (o.cluster_policy(workload_type=VM, sandbox=False, dra=False),
     "vm-passthrough is in use but neither sandboxDevicePlugin nor draKubeletPlugin is enabled"),
    (o.cluster_policy(sandbox=True, dra=True, device_plugin=False), "both enabled (mutually exclusive)"),
    (o.cluster_policy(sandbox=False, dra=True, device_plugin=True),
     "devicePlugin and draKubeletPlugin are both enabled"),
])
def test_policy_inconsistent(apiserver, kube, policy, fragment):
    seed(apiserver, policy=policy)
    pol = cluster(run(kube))["operator.policy"]  # --method auto: the policy itself decides what is checked
    assert pol.status == Status.FAIL and fragment in pol.evidence and "helm upgrade" in pol.remedy


def test_policy_absent(apiserver, kube):
    seed(apiserver)
    apiserver.delete_now("RBLNClusterPolicy", "rbln-cluster-policy")
    c = cluster(run(kube))
    assert c["operator.policy"].status == Status.FAIL and "no RBLNClusterPolicy" in c["operator.policy"].evidence


# -- DRA driver ----------------------------------------------------------------------------------


def test_dra_driver_missing_and_deviceclass_missing(apiserver, kube):
    seed(apiserver, method="dra")
    apiserver.delete_now("DaemonSet", "rbln-dra-kubelet-plugin", "rbln-system")
    apiserver.delete_now("DeviceClass", "vfio-npu.rebellions.ai")
    c = cluster(run(kube))
    assert c["dra.driver"].status == Status.FAIL and "draKubeletPlugin.enabled=true" in c["dra.driver"].remedy
    assert c["dra.deviceclass"].status == Status.FAIL


def test_dra_driver_too_old(apiserver, kube):
    seed(apiserver, method="dra")
    apiserver.delete_now("DaemonSet", "rbln-dra-kubelet-plugin", "rbln-system")
    apiserver.add(dra_daemonset("v0.2.0"))
    d = cluster(run(kube))["dra.driver"]
    assert d.status == Status.FAIL and "v0.2.0 < 0.2.1" in d.evidence


def test_dra_driver_not_ready_warns(apiserver, kube):
    seed(apiserver, method="dra")
    apiserver.delete_now("DaemonSet", "rbln-dra-kubelet-plugin", "rbln-system")
    apiserver.add(dra_daemonset(desired=3, ready=1))
    d = cluster(run(kube))["dra.driver"]
    assert d.status == Status.WARN and "1/3 ready" in d.evidence


def test_dra_daemonset_list_forbidden(apiserver, kube):
    seed(apiserver, method="dra")
    apiserver.forbid("list", "daemonsets")
    d = cluster(run(kube))["dra.driver"]
    assert d.status == Status.WARN and "forbidden" in d.evidence
    assert "grant `list` on `daemonsets.apps` cluster-wide" in d.remedy


# -- helm ----------------------------------------------------------------------------------------


def test_helm_versions(apiserver, kube, no_helm):
    seed(apiserver, nodes=1)
    assert cluster(run(kube))["helm.version"].status == Status.SKIP
    fake_helm(no_helm, "v3.8.2+g6e3701e")
    h = cluster(run(kube))["helm.version"]
    assert h.status == Status.FAIL and "v3.8.2+g6e3701e < 3.9.0" in h.evidence
    fake_helm(no_helm, "v3.14.2+gc309b6f")
    assert cluster(run(kube))["helm.version"].status == Status.PASS
    fake_helm(no_helm, "Error: boom", code=1)
    h = cluster(run(kube))["helm.version"]
    assert h.status == Status.WARN and "exited 1" in h.evidence


# -- NFD and nodes -------------------------------------------------------------------------------


def test_nfd_missing(apiserver, kube):
    seed(apiserver, features=False, nodes=0)
    apiserver.remove_resource("nodefeatures.nfd.k8s-sigs.io")
    # the operator's own label marks the node, NFD's are absent
    node = o.node("npu-x", labels={"rebellions.ai/npu.present": "true"})
    apiserver.add(node)
    report = run(kube)
    c = cluster(report)
    assert c["nfd.installed"].status == Status.FAIL and "nfd.enabled=true" in c["nfd.installed"].remedy
    assert any(r.path.endswith("/pods") for r in apiserver.requests)  # looked for NFD pods before failing
    apiserver.add(o.pod("node-feature-discovery", "nfd-worker-abc",
                        labels={"app.kubernetes.io/name": "node-feature-discovery"}))
    assert cluster(run(kube))["nfd.installed"].status == Status.PASS


def test_no_npu_nodes(apiserver, kube):
    seed(apiserver, nodes=0)
    apiserver.add(o.node("cpu-1"))
    report = run(kube)
    c = cluster(report)
    assert c["nfd.npu-nodes"].status == Status.FAIL and c["nodes.vm-mode"].status == Status.SKIP
    assert report.nodes == 0 and not [x for x in report.checks if x.scope not in ("cluster",)]


def test_node_facts_missing_warn_and_name_local_preflight(apiserver, kube):
    names = seed(apiserver, features=False, nodes=2)
    report = run(kube)
    for id_ in ("node.iommu", "node.vfio-modules", "node.viommu"):
        for name in names:
            r = per_node(report, id_)[name]
            assert r.status == Status.WARN, (id_, r)
            assert "no NodeFeature object for this node" in r.evidence
            assert "rblnctl preflight --local" in r.remedy


def test_fake_default_node_feature_shape(apiserver, kube):
    """Older NFD: modules as kernel.loadedmodule attributes, iommu label, no cpu.cpuid."""
    seed(apiserver, features=False, nodes=1)
    apiserver.add(o.node_feature("npu-0000"))
    report = run(kube)
    assert per_node(report, "node.iommu")["npu-0000"].status == Status.PASS
    assert "iommu-enabled=true" in per_node(report, "node.iommu")["npu-0000"].evidence
    assert per_node(report, "node.vfio-modules")["npu-0000"].status == Status.PASS
    v = per_node(report, "node.viommu")["npu-0000"]
    assert v.status == Status.WARN and "no cpu.cpuid" in v.evidence


def test_node_iommu_off_fails_on_vm_nodes_warns_on_container_nodes(apiserver, kube):
    devices = [{"vendor": "1eff", "device": "1220", "class": "1200"},
               {"vendor": "15b3", "device": "101d", "class": "0200", "iommu_group/type": "DMA"}]
    seed(apiserver, features=False, nodes=0)
    apiserver.add(o.npu_node("vm-1", mode=VM), nfd_features("vm-1", iommu=False, pci_devices=devices),
                  o.npu_node("ct-1", mode="container"), nfd_features("ct-1", iommu=False, pci_devices=devices))
    report = run(kube)
    iommu = per_node(report, "node.iommu")
    assert iommu["vm-1"].status == Status.FAIL and "the NPUs have none" in iommu["vm-1"].evidence
    assert iommu["ct-1"].status == Status.WARN and "container mode" in iommu["ct-1"].evidence


def test_node_iommu_unknown_without_any_group_attribute(apiserver, kube):
    seed(apiserver, features=False, nodes=0)
    apiserver.add(o.npu_node("vm-1", mode=VM), nfd_features("vm-1", iommu=False))
    r = per_node(run(kube), "node.iommu")["vm-1"]
    assert r.status == Status.WARN and "older than v0.10" in r.evidence  # never guessed as off


def test_vm_worker_without_viommu(apiserver, kube):
    devices = [{"vendor": "1eff", "device": "1220", "class": "1200"},
               {"vendor": "1af4", "device": "1041", "class": "0200", "iommu_group/type": "DMA"}]
    seed(apiserver, features=False, nodes=0)
    apiserver.add(o.npu_node("vm-1", mode=VM), nfd_features("vm-1", hypervisor=True, iommu=False, pci_devices=devices),
                  o.npu_node("vm-2", mode=VM), nfd_features("vm-2", hypervisor=True))
    report = run(kube)
    v = per_node(report, "node.viommu")
    assert v["vm-1"].status == Status.FAIL and "VM without a vIOMMU" in v["vm-1"].evidence
    assert "intel-iommu" in v["vm-1"].remedy
    assert v["vm-2"].status == Status.PASS and "VM with a vIOMMU" in v["vm-2"].evidence


def test_vfio_modules_missing_on_vm_node(apiserver, kube):
    seed(apiserver, features=False, nodes=0)
    apiserver.add(o.npu_node("vm-1", mode=VM), nfd_features("vm-1", modules=("rebellions", "kvm")),
                  o.npu_node("ct-1", mode="container"), nfd_features("ct-1", modules=("rebellions",)))
    m = per_node(run(kube), "node.vfio-modules")
    assert m["vm-1"].status == Status.FAIL and "vfio, vfio_pci, vfio_iommu_type1 neither loaded nor built in" in \
        m["vm-1"].evidence
    assert m["ct-1"].status == Status.SKIP


def test_invalid_mode_label_and_deploy_skip(apiserver, kube):
    seed(apiserver, features=True, nodes=0)
    apiserver.add(o.npu_node("n-bad", mode="vm"), nfd_features("n-bad"),
                  o.npu_node("n-skip", mode=VM, labels={"rebellions.ai/npu.deploy.skip": "true"}),
                  nfd_features("n-skip"))
    report = run(kube)
    bad = per_node(report, "node.mode-label")["n-bad"]
    assert bad.status == Status.FAIL and "'vm' is not container or vm-passthrough" in bad.evidence
    assert "rblnctl node set-mode" in bad.remedy
    skip = per_node(report, "node.deploy-skip")["n-skip"]
    assert skip.status == Status.WARN and "rebellions.ai/npu.deploy.skip-" in skip.remedy
    assert per_node(report, "node.deploy-skip")["n-bad"].status == Status.PASS


def test_single_node(apiserver, kube):
    seed(apiserver, nodes=5)
    apiserver.clear_requests()
    report = run(kube, node="npu-0003")
    assert {c.scope for c in report.checks if c.scope != "cluster"} == {"npu-0003"}
    assert report.nodes == 1 and problems(report) == []
    assert not any(r.path == "/api/v1/nodes" for r in apiserver.requests)  # one GET, no node list
    report = run(kube, node="ghost")
    assert cluster(report)["nfd.npu-nodes"].status == Status.FAIL


def test_selector_narrows_nodes(apiserver, kube):
    seed(apiserver, nodes=3)
    apiserver.add(o.npu_node("gpu-ish", mode=VM, labels={"pool": "b"}), nfd_features("gpu-ish"))
    report = run(kube, selector="pool=b")
    assert {c.scope for c in report.checks if c.scope != "cluster"} == {"gpu-ish"}


# -- RBAC, failures, scale -----------------------------------------------------------------------


def test_forbidden_kubevirt_list_is_a_finding(apiserver, kube):
    seed(apiserver)
    apiserver.forbid("list", "kubevirts")
    report = run(kube)
    k = cluster(report)["kubevirt.installed"]
    assert k.status == Status.WARN and "forbidden" in k.evidence
    assert "grant `list` on `kubevirts.kubevirt.io` cluster-wide" in k.remedy
    assert "kubectl auth can-i list kubevirts.kubevirt.io -A" in k.remedy
    assert cluster(report)["kubevirt.gates"].status == Status.SKIP


def test_forbidden_node_list_is_a_finding(apiserver, kube):
    seed(apiserver)
    apiserver.forbid("list", "nodes")
    report = run(kube)
    n = cluster(report)["nfd.npu-nodes"]
    assert n.status == Status.WARN and "`list` on `nodes`" in n.remedy
    assert report.nodes == 0


def test_forbidden_node_features_list_is_a_finding(apiserver, kube):
    seed(apiserver, nodes=2)
    apiserver.forbid("list", "nodefeatures")
    report = run(kube)
    n = cluster(report)["nfd.installed"]
    assert n.status == Status.WARN and "`list` on `nodefeatures.nfd.k8s-sigs.io`" in n.remedy
    r = per_node(report, "node.vfio-modules")["npu-0000"]
    assert r.status == Status.WARN and "could not be read (see nfd.installed)" in r.evidence


def test_server_error_on_one_list_is_a_finding(apiserver, kube):
    seed(apiserver)
    apiserver.inject_fault(method="GET", path=r"/rblnclusterpolicies$", status=500, message="etcd timeout", times=4)
    kube.clock = FakeClock()  # the read is tried 4 times before it becomes a finding
    c = cluster(run(kube))
    assert c["operator.policy"].status == Status.WARN and "etcd timeout" in c["operator.policy"].evidence


def test_unreachable_server_raises():
    url = closed_port_url()
    kube = connect(KubeOptions(server=url, request_timeout_s=2))
    with pytest.raises(ClusterUnreachable, match=url):
        ClusterPreflight(kube=kube).run()


@pytest.mark.parametrize("method", ["sandbox", "dra"])
def test_thousand_nodes_bounded_requests(apiserver, kube, method):
    seed(apiserver, method=method, nodes=1000)
    apiserver.clear_requests()
    before = kube.request_count
    report = run(kube)
    sent = kube.request_count - before
    assert sent == len(apiserver.requests) and sent < 20, [r.path for r in apiserver.requests]
    assert report.nodes == 1000 and problems(report) == []
    assert len(report.checks) == len(CLUSTER_IDS) + 1000 * len(NODE_IDS)
    groups = group_checks(c for c in report.checks if c.scope != "cluster")
    assert len(groups) == len(NODE_IDS)  # one row per check, not 1,000
    # NodeFeature objects are listed once for all nodes, never per node
    nf = [r for r in apiserver.requests if "nodefeatures" in r.path]
    assert all(r.path == "/apis/nfd.k8s-sigs.io/v1alpha1/nodefeatures" for r in nf) and len(nf) <= 3


def test_grouping_of_mixed_results(apiserver, kube):
    seed(apiserver, nodes=4)
    apiserver.mutate("Node", "npu-0001", fn=lambda n: n["metadata"]["labels"].update(
        {"rebellions.ai/npu.workload.config": "VM"}))
    report = run(kube)
    groups = [g for g in group_checks(c for c in report.checks if c.scope != "cluster") if g.id == "node.mode-label"]
    assert [(g.status, g.scopes) for g in groups] == [
        (Status.FAIL, ["npu-0001"]), (Status.PASS, ["npu-0000", "npu-0002", "npu-0003"])]



# -- unknown is not a failure; remedies that work -----------------------------------------------


@pytest.mark.parametrize("version", [None, "", "weird"])
def test_dra_gate_with_unknown_kubevirt_version_warns_and_remedy_needs_force(apiserver, kube, version):
    kv = o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0")
    if version is None:
        del kv["status"]["observedKubeVirtVersion"]
    else:
        kv["status"]["observedKubeVirtVersion"] = version
    seed(apiserver, method="dra", kubevirt=kv)
    c = cluster(run(kube))
    gates = c["kubevirt.gates"]
    # HostDevicesWithDRA unlisted + version unknown: whether it is on is unknown, not off
    assert gates.status == Status.WARN, gates
    # enable-gates --dra refuses an unknown version without --force: the remedy must say so
    assert "`rblnctl kubevirt enable-gates --dra --force`" in gates.remedy
    if version == "weird":
        assert "'weird'" in c["kubevirt.version"].evidence and "empty" not in c["kubevirt.version"].evidence


def test_dra_gate_on_old_kubevirt_remedy_upgrades_first(apiserver, kube):
    seed(apiserver, method="dra", kubevirt=o.kubevirt(feature_gates=["HostDevices"], version="v1.8.2"))
    gates = cluster(run(kube))["kubevirt.gates"]
    assert gates.status == Status.FAIL
    assert "upgrade KubeVirt to 1.9.0" in gates.remedy  # enable-gates --dra alone would be refused


def test_bad_selector_is_invalid_input_not_a_passing_run(apiserver, kube):
    seed(apiserver)
    with pytest.raises(InvalidInput) as err:
        run(kube, selector="bad selector!!")
    assert "bad selector!!" in str(err.value)


def test_ignored_policy_is_not_the_one_checked(apiserver, kube):
    """The operator acts on one RBLNClusterPolicy and marks the others PolicyIgnored: check the active one."""
    seed(apiserver)  # rbln-cluster-policy: sandbox
    ignored = o.cluster_policy("a-leftover", sandbox=False, dra=True, device_plugin=False)
    ignored["status"] = {"state": "ignored", "conditions": [
        {"type": "Ready", "status": "False", "reason": "PolicyIgnored",
         "message": "Another RBLNClusterPolicy is already active; this policy is ignored"}]}
    apiserver.add(ignored)
    report = run(kube)
    assert report.method == "sandbox" and "rbln-cluster-policy" in report.method_note
    p = cluster(report)["operator.policy"]
    assert p.status == Status.PASS and p.evidence.startswith("rbln-cluster-policy:")
    assert "a-leftover" in p.evidence  # the other one is named


def test_unreadable_policy_does_not_claim_the_operator_is_missing(apiserver, kube):
    seed(apiserver, operator=operator_deployment(namespace="elsewhere", labels={}))
    apiserver.forbid("list", "rblnclusterpolicies")
    c = cluster(run(kube))
    m = c["cluster.method"]
    assert m.status == Status.WARN and "install the RBLN NPU Operator" not in m.remedy and "--method" in m.remedy
    op = c["operator.version"]
    assert "(the RBLNClusterPolicy CRD is installed)" not in op.evidence and "unknown" in op.evidence


def test_unreadable_nodes_do_not_claim_nothing_is_advertised(apiserver, kube):
    seed(apiserver)
    apiserver.forbid("list", "nodes")
    p = cluster(run(kube))["kubevirt.permitted-devices"]
    assert "no node advertises" not in p.evidence and "could not be read" in p.evidence


def test_remedies_pick_the_cr_when_there_are_several(apiserver, kube):
    """With two KubeVirt CRs, `rblnctl kubevirt ...` without --name/--namespace refuses: the remedy must pick one."""
    seed(apiserver, kubevirt=o.kubevirt(feature_gates=[]))
    apiserver.add(o.kubevirt("kv2", "other", feature_gates=[], phase="Deploying"))
    c = cluster(run(kube))
    assert "`rblnctl kubevirt enable-gates --name kubevirt -n kubevirt`" in c["kubevirt.gates"].remedy
    assert "`rblnctl kubevirt permit-devices --from-cluster --name kubevirt -n kubevirt`" in \
        c["kubevirt.permitted-devices"].remedy
