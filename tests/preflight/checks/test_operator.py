"""`operator.version`: found by label, chart label or image tag; floors per method; unknown warns."""

from __future__ import annotations

import pytest

from rblnctl.preflight.model import Status
from tests.preflight.cluster_support import operator_deployment, seed, run, cluster


def test_operator_missing(apiserver, kube):
    seed(apiserver)
    apiserver.delete_now("Deployment", "rbln-npu-operator", "rbln-system")
    apiserver.remove_resource("rblnclusterpolicies.rebellions.ai")
    report = run(kube)
    c = cluster(report)
    assert c["operator.version"].status == Status.FAIL and "helm upgrade --install" in c["operator.version"].remedy
    assert c["operator.policy"].status == Status.SKIP
    assert c["cluster.method"].status == Status.WARN and report.method == "sandbox"


def test_operator_whose_sandbox_plugin_serves_no_vm_fails(apiserver, kube):
    """0.3.0 <= version < 0.4.4: the sandbox plugin waits in Init for the driver pod's marker (operator/release.py)."""
    seed(apiserver, operator=operator_deployment("0.4.0"))
    op = cluster(run(kube))["operator.version"]
    assert op.status == Status.FAIL and "0.4.0 < 0.4.4" in op.evidence and ".driver-ctr-ready" in op.evidence
    assert "upgrade the operator to >= 0.4.4" in op.remedy and "helm upgrade --install" in op.remedy
    assert "set-method dra" not in op.remedy  # DRA serves VMs only from 0.6.0: no way out through it here


def test_operator_older_than_rblnctl_supports(apiserver, kube):
    seed(apiserver, operator=operator_deployment("0.2.2"))
    op = cluster(run(kube))["operator.version"]
    assert op.status == Status.FAIL and "0.2.2 < 0.4.4" in op.evidence


def test_operator_too_old_for_dra_only(apiserver, kube):
    seed(apiserver, method="dra", operator=operator_deployment("0.5.2"))
    # auto: a policy enabling draKubeletPlugin on a release whose DRA plugin serves no VM is not counted
    report = run(kube)
    m = cluster(report)["cluster.method"]
    assert report.method == "sandbox" and m.status == Status.WARN
    assert "enables draKubeletPlugin, but" in m.evidence and "0.5.2 < 0.6.0" in m.evidence
    assert "upgrade the operator to >= 0.6.0, or use the sandbox method" in m.remedy
    op = cluster(run(kube, method="dra"))["operator.version"]
    assert op.status == Status.FAIL and "0.5.2 < 0.6.0" in op.evidence and "no DRA kubelet plugin" in op.evidence
    assert "upgrade the operator to >= 0.6.0" in op.remedy


def test_operator_version_unknown_is_a_warning(apiserver, kube):
    seed(apiserver, operator=operator_deployment(None))
    op = cluster(run(kube))["operator.version"]
    assert op.status == Status.WARN and "version unknown" in op.evidence
    # the assumption rblnctl then makes is named (operator/release.py ASSUMED)
    assert "assumes the release's sandbox-device-plugin serves vm-passthrough nodes" in op.evidence
    assert "from 0.4.4" in op.evidence


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
    assert op.status == Status.FAIL and "0.4.1" in op.evidence and "from image" in op.evidence


def test_unreadable_policy_does_not_claim_the_operator_is_missing(apiserver, kube):
    seed(apiserver, operator=operator_deployment(namespace="elsewhere", labels={}))
    apiserver.forbid("list", "rblnclusterpolicies")
    c = cluster(run(kube))
    m = c["cluster.method"]
    assert m.status == Status.WARN and "install the RBLN NPU Operator" not in m.remedy and "--method" in m.remedy
    op = c["operator.version"]
    assert "(the RBLNClusterPolicy CRD is installed)" not in op.evidence and "unknown" in op.evidence



# -- issue 41: on each modelled release line, what works (sandbox, DRA) and what does not, one line each -------------

LINES = [  # (operator version, extra setup, method) -> (sandbox status, its words, dra status, its words)
    # v0.1-v0.3.0: operator.version already FAILs the release for sandbox (its floor), so the line's verdict is said
    # (SKIP, "operator.version fails for this"), not failed twice for one cause
    ("0.2.2", None, "sandbox", (Status.SKIP, "sandbox does not work on chart v0.1.0-v0.2.2"),
     (Status.SKIP, "dra does not work on chart v0.1.0-v0.2.2")),
    ("0.3.0", None, "sandbox", (Status.SKIP, "sandbox does not work on chart v0.3.0 (public)"),
     (Status.SKIP, "dra does not work on chart v0.3.0 (public)")),
    ("0.6.0", None, "sandbox", (Status.PASS, "sandbox works on the vfio/DRA line"),
     (Status.SKIP, "dra depends on the vfio/DRA line")),
    ("0.6.0", "public-driver", "dra", (Status.PASS, "sandbox works on the vfio/DRA line"),
     (Status.FAIL, "dra does not work on the vfio/DRA line")),
    ("0.6.0", None, "dra", (Status.PASS, "sandbox works on the vfio/DRA line"),
     (Status.PASS, "dra works on the vfio/DRA line")),
    ("0.6.0", "partition", "sandbox", (Status.PASS, "sandbox works on the partition line"),
     (Status.SKIP, "dra does not work on the partition line")),
    (None, None, "sandbox", (Status.WARN, "sandbox: unknown"), (Status.SKIP, "dra: unknown")),
]


@pytest.mark.parametrize("version, extra, method, sandbox, dra", LINES,
                         ids=["v0.2", "v0.3.0", "vfio-dra", "vfio-dra-public-driver", "vfio-dra-driver-0.2.1",
                              "partition", "unknown"])
def test_preflight_says_per_release_line_what_works(apiserver, kube, version, extra, method, sandbox, dra):
    from tests.fakes import partition as P
    from tests.preflight.cluster_support import dra_daemonset

    names = seed(apiserver, method=method, operator=operator_deployment(version))
    if extra == "partition":  # the admin's partition label on a node (op@74c5b08 gate.go's contract)
        apiserver.mutate("Node", names[0], fn=lambda n: n["metadata"]["labels"].update(P.PARTITIONED_ALL))
    if extra == "public-driver":
        apiserver.delete_now("DaemonSet", "rbln-dra-kubelet-plugin", "rbln-system")
        apiserver.add(dra_daemonset("v0.1.2"))
    c = cluster(run(kube))
    for key, (status, words) in (("sandbox", sandbox), ("dra", dra)):
        finding = c[f"operator.line.{key}"]
        assert finding.status == status and finding.evidence.startswith(words), (key, finding)
        assert "\n" not in finding.evidence
        if key == method and status == Status.SKIP and "does not work" in words:
            assert c["operator.version"].status == Status.FAIL and "operator.version fails" in finding.evidence
