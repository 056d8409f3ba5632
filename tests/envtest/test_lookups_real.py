"""Not-found hints and "did you mean" on a real kube-apiserver (issue 30): the cluster-wide list by field selector
`metadata.name` that finds the namespace a VM is in is served for KubeVirt's CRDs as for any resource."""

from __future__ import annotations

import re

from tests.fakes import objects as o


def test_a_vm_in_another_namespace_is_named_by_the_real_server(real):
    real.api.seed(o.npu_node("npu-node-1", mode="vm-passthrough"), o.vm("vms", "plain", running=False),
                  o.namespace("other"), o.vm("other", "unrelated", running=False))
    r = real.rblnctl("vm", "attach", "plain", "--npus", "1")
    assert r.exit_code == 1
    assert 'VirtualMachine "plain" not found in namespace "default"; it exists in namespace vms (-n vms)' in r.stderr
    r = real.rblnctl("vm", "diagnose", "plain", "-n", "other")
    # the hint carries the connection flags given (--kubeconfig) before the command
    assert r.exit_code == 1 and re.search(r"`rblnctl .*vm diagnose plain -n vms`", r.stdout + r.stderr)


def test_did_you_mean_reads_the_names_the_real_server_holds(real):
    from tests.vm.test_did_you_mean import check_product_typo, check_resource_typo, seed

    seed(real.api)
    check_resource_typo(real.rblnctl)
    check_product_typo(real.rblnctl)
