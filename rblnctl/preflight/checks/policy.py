"""`operator.policy`: the RBLNClusterPolicy the operator acts on passes its admission rules and enables the method."""

from __future__ import annotations

from rblnctl import constants as C
from rblnctl.operator.policy import Policy, choose_active
from rblnctl.preflight.checks.common import policy_remedy, runnable, unreadable
from rblnctl.preflight.facts import ClusterFacts
from rblnctl.preflight.model import SCOPE_CLUSTER, Findings, Status


def policy_problems(p: Policy, *, method: str, vm_nodes: int) -> list[str]:
    """Violations of the operator's policy admission rules, plus what the checked method needs."""
    problems = p.admission_problems()
    vm_use = p.workload_type == C.MODE_VM or vm_nodes > 0
    if not p.is_enabled(C.COMP_VFIO_MANAGER) and p.workload_type != C.MODE_VM:
        why = f"{vm_nodes} node(s) are labelled {C.MODE_VM}" if vm_nodes else "VM passthrough needs it"
        problems.append(f"vfioManager is disabled ({why})")
    wanted = "draKubeletPlugin" if method == C.METHOD_DRA else "sandboxDevicePlugin"
    enabled = p.is_enabled(C.COMP_DRA if method == C.METHOD_DRA else C.COMP_SANDBOX)
    if vm_use and not p.allocators(C.MODE_VM):
        if p.workload_type != C.MODE_VM:  # admission_problems() names it for workloadType vm-passthrough
            problems.append(f"{C.MODE_VM} is in use but neither sandboxDevicePlugin nor draKubeletPlugin is enabled")
    elif not enabled:
        problems.append(f"{wanted} is disabled but the {method} method needs it")
    return problems


def check_policy(f: ClusterFacts, out: Findings) -> None:
    """FAIL with the `--set` values to change when the active policy breaks a rule; SKIP without the CRD."""
    id_, title = "operator.policy", "RBLNClusterPolicy consistent"
    if f.policies.absent:
        out.add(id_, title, SCOPE_CLUSTER, Status.SKIP,
                "the RBLNClusterPolicy CRD is not installed (see operator.version)")
        return
    if not f.policies.ok:
        unreadable(out, id_, title, f.policies)
        return
    items = f.policies.value or []
    if not items:
        fix = policy_remedy(f, {"vfioManager": True, "sandboxDevicePlugin": True})
        out.add(id_, title, SCOPE_CLUSTER, Status.FAIL, "no RBLNClusterPolicy: the operator deploys nothing",
                f"create one (the operator chart does by default), e.g. {fix.text}", runnable(fix))
        return
    choice = choose_active(items)
    p = choice.active
    assert p is not None
    vm_nodes = sum(1 for m in f.effective_modes().values() if m == C.MODE_VM)
    problems = policy_problems(p, method=f.method, vm_nodes=vm_nodes)
    state = f"{p.name}: {p.switches()}"
    for note in choice.notes:
        state += f" ({note})"
    shared = p.shared_resources if f.method == C.METHOD_SANDBOX else ()
    if not problems and shared:
        fix = p.own_names_remedy()  # the one remedy vm fit and permit-devices give too
        assert fix.command is not None
        # chart v0.3.0's CRD defaults sandboxDevicePlugin.resourceList to devicePlugin's rebellions.ai/ATOM
        # (Policy.shared_resources): container-mode nodes advertise the name VMs ask for, and the scheduler may put a
        # VM's virt-launcher there, on NPUs no vfio-pci holds.
        out.add(id_, title, SCOPE_CLUSTER, Status.WARN,
                f"{state}; devicePlugin and sandboxDevicePlugin both advertise {', '.join(shared)} (the v0.3.0 CRD's "
                "default when sandboxDevicePlugin.resourceList is left out): a VM asking for it may be scheduled on a "
                "container-mode node, whose NPUs are not bound to vfio-pci",
                fix.inline(), fix.command.line)
        return
    if not problems:
        out.add(id_, title, SCOPE_CLUSTER, Status.PASS, state)
        return
    changes = p.method_changes(f.method)
    if not changes:  # the rules broken are not switches this check can name (e.g. workloadType's value)
        out.add(id_, title, SCOPE_CLUSTER, Status.FAIL, f"{state}; " + "; ".join(problems),
                f"edit the RBLNClusterPolicy: `kubectl edit rblnclusterpolicy {p.name}`",
                f"kubectl edit rblnclusterpolicy {p.name}")
        return
    fix = policy_remedy(f, changes)
    wanted = ", ".join(f"{k}.enabled={'true' if v else 'false'}" for k, v in changes.items())
    why = (" (devicePlugin and draKubeletPlugin may not both be on)"
           if f.method == C.METHOD_DRA and "devicePlugin" in changes else "")
    out.add(id_, title, SCOPE_CLUSTER, Status.FAIL, f"{state}; " + "; ".join(problems),
            f"set {wanted}{why}: {fix.text}", runnable(fix))
