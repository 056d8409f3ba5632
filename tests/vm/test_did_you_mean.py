"""Did you mean, among the names the cluster uses (issue 30): a mistyped resource name gets the advertised one and
no remedy that would permit the typo in KubeVirt; a mistyped product gets the products there are, never
"advertises nothing ... (advertised: X)"; a mistyped method the close one."""

from __future__ import annotations

from tests.fakes import objects as o
from tests.fakes.releases import V0_3_0
from tests.helpers import cli

NS = "vms"
VM_RES = "rebellions.ai/ATOM_PT"  # chart v0.3.0's resourceList name for an RBLN-CA12's VM resource


def seed(api) -> None:
    policy = V0_3_0.policy(vfio_manager=True, sandbox=True)
    api.seed(policy, o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0", permitted_pci=[("1EFF:1120", VM_RES)]),
             o.npu_node("npu-node-1", mode="vm-passthrough", npus=4, product="RBLN-CA12", release=V0_3_0,
                        policy=policy),
             o.vm(NS, "plain", running=False))


def refusal_of(run, *args: str):
    r = run("vm", "attach", "plain", "-n", NS, "--npus", "1", *args)
    assert r.exit_code == 1 and "refusing to change the NPUs of VM vms/plain" in r.stderr
    return r.stderr


def check_resource_typo(run) -> None:
    err = refusal_of(run, "--resource", "rebellions.ai/ATOMPT")
    assert "no vm-passthrough node advertises rebellions.ai/ATOMPT (did you mean rebellions.ai/ATOM_PT?)" in err
    assert "permit-devices" not in err  # would permit the typo


def check_product_typo(run) -> None:
    err = refusal_of(run, "--product", "RBLN-CA2")
    assert "no vm-passthrough node advertises a resource of product RBLN-CA2 (did you mean RBLN-CA12?)" in err
    assert "products: RBLN-CA12: rebellions.ai/ATOM_PT on npu-node-1" in err
    assert "advertises an NPU of product" not in err  # the old self-contradicting line


def test_a_mistyped_resource_name_gets_the_advertised_one_and_no_permit_remedy(apiserver):
    seed(_Seeder(apiserver))
    check_resource_typo(lambda *a: cli(*a, server=apiserver.url))


def test_a_mistyped_product_gets_the_products_there_are(apiserver):
    seed(_Seeder(apiserver))
    check_product_typo(lambda *a: cli(*a, server=apiserver.url))
    r = cli("vm", "attach", "plain", "-n", NS, "--npus", "1", "--product", "RBLN-CA12", server=apiserver.url)
    assert r.exit_code == 0, r.stderr  # the resourceList ties ATOM_PT to the product


def test_a_mistyped_method_gets_the_close_one():
    r = cli("policy", "set-method", "dar")
    assert r.exit_code == 2 and "'dar' is not one of 'sandbox', 'dra' (did you mean dra?)" in r.stderr
    r = cli("policy", "set-method", "xyz")
    assert r.exit_code == 2 and "did you mean" not in r.stderr


class _Seeder:
    def __init__(self, apiserver) -> None:
        self.apiserver = apiserver

    def seed(self, *objs) -> None:
        self.apiserver.add(*objs)


def test_permit_devices_before_any_vm_node_names_only_a_resource_the_cards_get(apiserver):
    policy = V0_3_0.policy(vfio_manager=True, sandbox=True)
    apiserver.add(policy, o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0"),
                  o.npu_node("npu-node-1", npus=4, product="RBLN-CA12", release=V0_3_0, policy=policy))
    r = cli("kubevirt", "permit-devices", "--dry-run", server=apiserver.url)
    assert r.exit_code == 1 and "--resource-name rebellions.ai/ATOM_PT`" in r.stderr  # the entry for RBLN-CA12
    apiserver.mutate("Node", "npu-node-1", None,
                     lambda n: n["metadata"]["labels"].update({"rebellions.ai/npu.product": "RBLN-CA99"}))
    r = cli("kubevirt", "permit-devices", "--dry-run", server=apiserver.url)
    assert r.exit_code == 1 and "--resource-name" not in r.stderr  # no entry covers it: no guess
    assert "the plugin gives RBLN-CA99" in r.stderr
    # issue 39: set-mode refuses that switch (no resourceList entry for RBLN-CA99), so it is not named
    assert "node set-mode vm npu-node-1`" not in r.stderr and "no NPU node can switch to vm mode" in r.stderr


def test_permit_devices_of_a_mistyped_name_suggests_the_policys_own_names_not_18_others(apiserver):
    policy = V0_3_0.policy(vfio_manager=True, sandbox=True)
    apiserver.add(policy, o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0"))
    r = cli("kubevirt", "permit-devices", "--dry-run", "--resource-name", "rebellions.ai/ATOM_MAXPT",
            server=apiserver.url)
    assert r.exit_code == 2
    assert "(did you mean rebellions.ai/ATOM_MAX_PT?)" in r.stderr
    assert "this policy's resourceList names rebellions.ai/ATOM_PT, rebellions.ai/ATOM_MAX_PT" in r.stderr
    assert "RBLN-CR23_VF" not in r.stderr and len(r.stderr) < 400
