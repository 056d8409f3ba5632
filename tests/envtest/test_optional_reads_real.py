"""A read RBAC refuses is said, never read as "none", on a real kube-apiserver with a real RBAC authorizer
(issue 29: rblnctl.kube.optional)."""

from __future__ import annotations

from rblnctl import rbac
from tests.envtest.test_rbac_real import NS, _without, world


def test_set_mode_without_list_on_vms_says_the_vms_are_unknown(later_policy_crd_installed, real):
    """Switching the last vm node to container: with the VMs listable it warns that VM(s) still ask for NPUs;
    without list on virtualmachines it must say that is unknown, not stay silent as if no VM asked."""
    world(real)
    args = ("node", "set-mode", "container", "v1", "--yes", "--dry-run")
    r = real.rblnctl(*args, kubeconfig=real.user_kubeconfig(rbac.rbac_objects(rbac.ROLE_OPERATE, NS)))
    assert r.exit_code == 0, r.stderr
    assert "still ask for NPUs" in r.stdout + r.stderr
    roles = _without(rbac.rbac_objects(rbac.ROLE_OPERATE, NS), "virtualmachines", "list")
    r = real.rblnctl(*args, kubeconfig=real.user_kubeconfig(roles))
    out = " ".join((r.stdout + r.stderr).split())
    assert r.exit_code == 0, r.stderr
    assert "whether VMs still ask for NPUs is unknown" in out and "cannot list VirtualMachines (forbidden)" in out
