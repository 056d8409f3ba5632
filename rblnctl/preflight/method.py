"""Which allocation method preflight checks: `--method`, or what the active RBLNClusterPolicy enables."""

from __future__ import annotations

from rblnctl import constants as C
from rblnctl.operator.policy import choose_active
from rblnctl.operator.release import UNKNOWN, OperatorRelease
from rblnctl.preflight.fetch import Fetch
from rblnctl.preflight.model import Status


def choose_method(requested: str, policies: Fetch, release: OperatorRelease = UNKNOWN
                  ) -> tuple[str, str, Status, str]:
    """Return (method, how it was chosen, status of that choice, remedy) for --method.

    Auto counts an allocator the policy enables only when `release` (the operator's) makes it serve
    vm-passthrough nodes (rblnctl.operator.release): chart v0.3.0's DRA kubelet plugin is container-only,
    so a v0.3.0 policy enabling draKubeletPlugin gives VMs nothing and the sandbox method is checked.
    """
    if requested in C.METHODS:
        return requested, f"--method {requested}", Status.PASS, ""
    if policies.error:
        return (C.METHOD_SANDBOX, ("auto: the RBLNClusterPolicy could not be read (see operator.policy), so "
                                   "checking the sandbox method"), Status.WARN,
                "pass --method sandbox|dra, or rerun with a kubeconfig that may list rblnclusterpolicies.rebellions.ai")
    if not policies.ok:
        return (C.METHOD_SANDBOX, "auto: no RBLNClusterPolicy CRD, so checking the sandbox method", Status.WARN,
                "install the RBLN NPU Operator with an RBLNClusterPolicy, or pass --method sandbox|dra")
    items = policies.value or []
    if not items:
        return (C.METHOD_SANDBOX, "auto: no RBLNClusterPolicy exists, so checking the sandbox method", Status.WARN,
                "create the RBLNClusterPolicy (the operator chart does), or pass --method sandbox|dra")
    p = choose_active(items).active
    assert p is not None
    if p.vm_method == C.METHOD_DRA and C.COMP_DRA not in p.allocators(C.MODE_VM, release=release):
        return (C.METHOD_SANDBOX, f"auto: RBLNClusterPolicy {p.name} enables draKubeletPlugin, but "
                f"{release.why(C.COMP_DRA)}; checking the sandbox method", Status.WARN, release.remedy(C.COMP_DRA))
    if p.vm_method == C.METHOD_DRA:
        extra = (" (sandboxDevicePlugin is enabled too, which admission rejects)"
                 if p.is_enabled(C.COMP_SANDBOX) else "")
        return C.METHOD_DRA, f"auto: RBLNClusterPolicy {p.name} enables draKubeletPlugin{extra}", Status.PASS, ""
    if p.vm_method == C.METHOD_SANDBOX:
        return C.METHOD_SANDBOX, f"auto: RBLNClusterPolicy {p.name} enables sandboxDevicePlugin", Status.PASS, ""
    return (C.METHOD_SANDBOX,
            f"auto: RBLNClusterPolicy {p.name} enables neither sandboxDevicePlugin nor draKubeletPlugin; "
            "checking the sandbox method", Status.WARN,
            f"enable one in the policy, for the sandbox method: {p.fix_text(p.method_changes(C.METHOD_SANDBOX))}; "
            f"for DRA: {p.fix_text(p.method_changes(C.METHOD_DRA))}; or pass --method")
