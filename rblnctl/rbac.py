"""The Kubernetes API access each rblnctl command needs, stated once: for `rblnctl rbac` and the preflight self-check.

Each command lists the (API group, resource, verbs) it uses, and where: across the cluster (a
ClusterRole: cluster-scoped objects, or namespaced objects in every namespace) or only in the
operator's namespace (a Role: the per-node Lease locks). `rblnctl rbac --role read` grants the
commands that only read; `--role operate` adds the ones that change the cluster. A test runs every
command against the fake API server with exactly these rules enforced and sees no 403, and removing
any one rule makes some command meet one: the table is neither short nor loose.

Discovery, /version, access reviews and SelfSubjectReview (who am I: the user the audit Events name) are
granted to every authenticated user by Kubernetes' default roles (system:discovery,
system:public-info-viewer, system:basic-user) and are not listed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rblnctl import constants as C

CLUSTER = "cluster"  # a ClusterRole rule
OPERATOR_NAMESPACE = "operator-namespace"  # a Role rule in the operator's namespace

ROLE_READ = "read"
ROLE_OPERATE = "operate"
ROLES = (ROLE_READ, ROLE_OPERATE)


@dataclass(frozen=True)
class Access:
    """One resource a command uses, with the verbs, and where."""

    group: str
    resource: str  # plural, with a subresource as `pods/eviction`
    verbs: tuple[str, ...]
    where: str = CLUSTER


def _a(group: str, resource: str, *verbs: str, where: str = CLUSTER) -> Access:
    return Access(group, resource, tuple(verbs), where)


# The reads every cluster command starts with: the active RBLNClusterPolicy and the operator's namespace.
_OPERATOR = (
    _a(C.CLUSTER_POLICY_GROUP, C.CLUSTER_POLICY_PLURAL, "list"),
    _a("apps", "deployments", "list"),
)
_NODES_READ = (_a("", "nodes", "list"),)
# The last log line of an operator component pod stuck in an init container (rblnctl.operator.cluster.init_log_line:
# node list, status, preflight, set-mode's timeout). Best effort: without it the line is left out.
_INIT_LOG = (_a("", "pods/log", "get", where=OPERATOR_NAMESPACE),)
_KUBEVIRT_READ = (_a(C.KUBEVIRT_GROUP, C.KUBEVIRT_PLURAL, "get", "list"),)
_KUBEVIRT_EDIT = (*_KUBEVIRT_READ, _a(C.KUBEVIRT_GROUP, C.KUBEVIRT_PLURAL, "patch"))
# drain and set-mode: the node (guarded patch, read back), its pods (listed, then watched until the
# evicted ones are gone), evictions (or deletes with --disable-eviction), DRA claims of its pods, the
# VMs on it (listed; a forced virt-launcher's VMI read for its emptyDisks; watched while KubeVirt
# evacuates one), and the node's Lease lock.
_NODE_CHANGE = (
    *_OPERATOR,
    _a("", "nodes", "get", "patch"),
    _a("", "pods", "list", "watch", "delete"),
    _a("", "pods/eviction", "create"),
    _a(C.DRA_GROUP, "resourceclaims", "get"),
    _a(C.KUBEVIRT_GROUP, C.VMI_PLURAL, "get", "list", "watch"),
    _a("coordination.k8s.io", "leases", "get", "create", "patch", "delete", where=OPERATOR_NAMESPACE),
)

# capacity (rblnctl.operator.capacity): the unfinished pods of the NPU nodes, and with DRA the driver's slices and
# every claim (node list --watch follows them by listing when it may not watch)
_CAPACITY_READ = (_a("", "pods", "list"), _a(C.DRA_GROUP, "resourceslices", "list"),
                  _a(C.DRA_GROUP, "resourceclaims", "list"))
# The audit trail (rblnctl.audit): an events.k8s.io Event in `default` when a run starts changing a Node or the
# RBLNClusterPolicy and one when it ends; `node history` lists them back.
_AUDIT = (_a(C.EVENTS_GROUP, "events", "create"),)

# vm: VMs and VMIs in every namespace; hand-made claims judged by their template's (or claim's) class.
_VMS_LIST = (_a(C.KUBEVIRT_GROUP, C.VM_PLURAL, "list"), _a(C.KUBEVIRT_GROUP, C.VMI_PLURAL, "list"))
_CLAIM_INDEX = (_a(C.DRA_GROUP, "resourceclaimtemplates", "list"), _a(C.DRA_GROUP, "resourceclaims", "list"))
# What a VM plan and a diagnosis read: the KubeVirt CR, the policy, the NPU nodes, the VM and its VMI, the DRA
# side, the pods on candidate nodes (capacity, the virt-launcher, operator components) and scheduling events;
# a DRA diagnosis also the VMIs sharing a claim name (every namespace) and the DRA plugin's log.
_VM_READ = (
    *_OPERATOR, *_NODES_READ, *_CLAIM_INDEX, *_CAPACITY_READ,  # capacity: what fits (rblnctl.vm.fit)
    _a(C.KUBEVIRT_GROUP, C.KUBEVIRT_PLURAL, "list"),
    _a(C.KUBEVIRT_GROUP, C.VM_PLURAL, "get"),
    _a(C.KUBEVIRT_GROUP, C.VMI_PLURAL, "get", "list"),
    _a("", "pods/log", "get", where=OPERATOR_NAMESPACE),  # the DRA plugin's (its crash's reason is only there)
    _a(C.DRA_GROUP, "deviceclasses", "get"),
    _a(C.DRA_GROUP, "resourceslices", "list"),
    _a(C.DRA_GROUP, "resourceclaims", "get"),
    _a("", "pods", "list"),
    _a("", "events", "list"),
)
# start/stop/restart (rblnctl.vm.lifecycle): read the VM and its VMI, ask virt-api (PUT = update), and wait by
# watching the VM, its VMI, the namespace's virt-launcher pods and (DRA) ResourceClaims
_VM_LIFECYCLE = (
    _a(C.KUBEVIRT_GROUP, C.VM_PLURAL, "get", "list", "watch"),
    _a(C.KUBEVIRT_GROUP, C.VMI_PLURAL, "get", "list", "watch"),
    _a("", "pods", "list", "watch"),
    _a(C.DRA_GROUP, "resourceclaims", "list", "watch"),
)
# attach/detach: the guarded VM patch, rblnctl's ResourceClaimTemplates, who else uses one, and a restart
# through virt-api's subresources (PUT = update; kubevirt/kubevirt pkg/virt-operator/resource/generate/rbac).
_VM_CHANGE = (
    *_VM_READ, *_VMS_LIST, *_VM_LIFECYCLE,
    _a(C.KUBEVIRT_GROUP, C.VM_PLURAL, "patch"),
    _a(C.DRA_GROUP, "resourceclaimtemplates", "get", "create", "delete"),
    _a(C.KUBEVIRT_SUBRESOURCES_GROUP, f"{C.VM_PLURAL}/stop", "update"),
    _a(C.KUBEVIRT_SUBRESOURCES_GROUP, f"{C.VM_PLURAL}/start", "update"),
)
# Host pods (rblnctl.hostpods: preflight --hosts, vfio status --node) are created in the operator's
# namespace (-n elsewhere), their logs read there; they are listed by label and deleted as drain's
# pods are, which the cluster-wide pod rules already grant.
_HOST_PODS = (
    _a("", "pods", "create", where=OPERATOR_NAMESPACE),
    _a("", "pods/log", "get", where=OPERATOR_NAMESPACE),
    _a("", "pods", "list", "delete"),
)
_PREFLIGHT = (
    *_OPERATOR, *_NODES_READ, *_INIT_LOG, _a("", "nodes", "get"), _a(C.KUBEVIRT_GROUP, C.KUBEVIRT_PLURAL, "list"),
    _a(C.NFD_GROUP, C.NFD_NODEFEATURE_PLURAL, "list"), _a("", "pods", "list"), _a("apps", "daemonsets", "list"),
    _a(C.DRA_GROUP, "deviceclasses", "get"), _a(C.DRA_GROUP, "resourceslices", "list"),
)

COMMANDS: Mapping[str, tuple[Access, ...]] = {
    # read
    "status": (*_OPERATOR, *_NODES_READ, _a(C.KUBEVIRT_GROUP, C.KUBEVIRT_PLURAL, "list"), *_VMS_LIST, *_CLAIM_INDEX,
               *_CAPACITY_READ, *_INIT_LOG),
    "vm list": (*_OPERATOR, *_VMS_LIST, *_CLAIM_INDEX),
    "vm diagnose": _VM_READ,
    "vm manifest": (*_OPERATOR, *_NODES_READ, _a(C.KUBEVIRT_GROUP, C.KUBEVIRT_PLURAL, "list"), *_CAPACITY_READ),
    "vm fit": (*_OPERATOR, *_NODES_READ, _a(C.KUBEVIRT_GROUP, C.KUBEVIRT_PLURAL, "list"), *_CAPACITY_READ),
    "node list": (*_OPERATOR, *_NODES_READ, *_CAPACITY_READ, *_INIT_LOG),
    "node history": (_a("", "nodes", "get"), _a(C.EVENTS_GROUP, "events", "list")),
    "kubevirt status": _KUBEVIRT_READ,
    "preflight": _PREFLIGHT,
    # operate
    "node drain": (*_NODE_CHANGE, *_NODES_READ, *_AUDIT),  # -l lists the NPU nodes it matches
    # the wait for the operator watches the node (by name), its operator pods, the policies and its DRA slices
    "node set-mode": (*_NODE_CHANGE, _a("", "nodes", "list", "watch"),  # list: also -l _a("", "pods", "list", "watch"),
                      _a(C.CLUSTER_POLICY_GROUP, C.CLUSTER_POLICY_PLURAL, "watch"),
                      _a(C.DRA_GROUP, "resourceslices", "list", "watch"),
                      _a(C.NFD_GROUP, C.NFD_NODEFEATURE_PLURAL, "list"),  # to vm: is the node's IOMMU on?
                      *_INIT_LOG, *_AUDIT),
    "kubevirt enable-gates": _KUBEVIRT_EDIT,
    # turning an NPU gate off: the VMIs of every namespace, for the running-VM guard (rblnctl.vm.guard)
    "kubevirt disable-gates": (*_KUBEVIRT_EDIT, _a(C.KUBEVIRT_GROUP, C.VMI_PLURAL, "list")),
    "kubevirt permit-devices": (*_KUBEVIRT_EDIT, *_OPERATOR, *_NODES_READ),
    "vm attach": _VM_CHANGE,
    "vm start": (*_VM_LIFECYCLE, _a(C.KUBEVIRT_SUBRESOURCES_GROUP, f"{C.VM_PLURAL}/start", "update")),
    "vm stop": (*_VM_LIFECYCLE, _a(C.KUBEVIRT_SUBRESOURCES_GROUP, f"{C.VM_PLURAL}/stop", "update")),
    # a restart of a stopped VM starts it
    "vm restart": (*_VM_LIFECYCLE, _a(C.KUBEVIRT_SUBRESOURCES_GROUP, f"{C.VM_PLURAL}/restart", "update"),
                   _a(C.KUBEVIRT_SUBRESOURCES_GROUP, f"{C.VM_PLURAL}/start", "update")),
    "vm detach": _VM_CHANGE,
    "preflight --hosts": (*_PREFLIGHT, *_HOST_PODS),  # creates pods: operate, not read
    "vfio status --node": _HOST_PODS,
    # every VM and VMI in every namespace (paged lists); a VM is read again only when a patch met a concurrent edit
    "kubevirt migrate-resources": (
        *_KUBEVIRT_EDIT, *_OPERATOR, *_NODES_READ, _a(C.KUBEVIRT_GROUP, C.VM_PLURAL, "get", "list", "patch"),
        _a(C.KUBEVIRT_GROUP, C.VMI_PLURAL, "list"),
    ),
    "policy show": (*_OPERATOR, *_NODES_READ, _a("apps", "daemonsets", "list")),
    "version": (_a(C.KUBEVIRT_GROUP, C.KUBEVIRT_PLURAL, "list"), _a("apps", "deployments", "list"),
                _a("apps", "daemonsets", "list")),
    # the policy (read, guarded patch), the VMIs holding NPUs and the VMs naming the old method, the
    # prerequisites (KubeVirt, the operator's and a DRA driver's version, the DRA API), the wait's watches
    # (policies, nodes, operator pods, slices, class), then --convert-vms: vm attach's reads and writes, never a
    # restart.
    "policy set-method": (
        *_OPERATOR, *_NODES_READ, *_VMS_LIST, *_CLAIM_INDEX,
        _a("apiextensions.k8s.io", "customresourcedefinitions", "get"),  # the policy's admission rules
        _a(C.CLUSTER_POLICY_GROUP, C.CLUSTER_POLICY_PLURAL, "get", "patch", "watch"), _a("", "nodes", "watch"),
        _a(C.KUBEVIRT_GROUP, C.KUBEVIRT_PLURAL, "list"), _a("apps", "daemonsets", "list"),
        _a("", "pods", "list", "watch"), _a(C.DRA_GROUP, "deviceclasses", "get", "list", "watch"),
        _a(C.DRA_GROUP, "resourceslices", "list", "watch"),
        _a(C.KUBEVIRT_GROUP, C.VM_PLURAL, "get", "patch"), _a(C.KUBEVIRT_GROUP, C.VMI_PLURAL, "get"),
        _a(C.DRA_GROUP, "resourceclaimtemplates", "get", "create", "delete"),
        *_AUDIT,
    ),
}

READ_COMMANDS = frozenset({"status", "node list", "node history", "kubevirt status", "preflight", "vm list",
                           "vm diagnose", "vm manifest", "vm fit", "policy show", "version"})


def commands_of(role: str) -> list[str]:
    """The commands a role grants: `read` the read-only ones, `operate` all."""
    if role not in ROLES:
        from rblnctl.errors import InvalidInput

        raise InvalidInput(f"unknown role {role!r}: use {' or '.join(ROLES)}")
    return [c for c in COMMANDS if role == ROLE_OPERATE or c in READ_COMMANDS]


def merged(accesses: Iterable[Access]) -> list[Access]:
    """One Access per (where, group, resource) with the union of the verbs, in a stable order."""
    verbs: dict[tuple[str, str, str], set[str]] = {}
    for a in accesses:
        verbs.setdefault((a.where, a.group, a.resource), set()).update(a.verbs)
    order = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
    return [Access(g, r, tuple(sorted(v, key=lambda x: order.index(x) if x in order else len(order))), w)
            for (w, g, r), v in sorted(verbs.items())]


def rule(a: Access) -> dict[str, Any]:
    """An RBAC PolicyRule for one Access."""
    return {"apiGroups": [a.group], "resources": [a.resource], "verbs": list(a.verbs)}


def rbac_objects(role: str, namespace: str, *, name: str = "rblnctl") -> list[dict[str, Any]]:
    """The ClusterRole (and, when the role locks nodes, the Role in the operator's namespace) for a role."""
    accesses = merged(a for c in commands_of(role) for a in COMMANDS[c])
    full = f"{name}-{role}"
    labels = {"app.kubernetes.io/name": "rblnctl", "app.kubernetes.io/component": role}
    out = [{
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": full, "labels": labels},
        "rules": [rule(a) for a in accesses if a.where == CLUSTER],
    }]
    local = [rule(a) for a in accesses if a.where == OPERATOR_NAMESPACE]
    if local:
        out.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                    "metadata": {"name": full, "namespace": namespace, "labels": labels}, "rules": local})
    return out


def allowed(rules: Iterable[Mapping[str, Any]], group: str, resource: str, verb: str) -> bool:
    """Whether PolicyRules (as a SelfSubjectRulesReview returns them) allow a verb, as RBAC matches rules."""
    sub = resource.partition("/")[2]
    for r in rules:
        verbs, groups, resources = r.get("verbs") or [], r.get("apiGroups") or [], r.get("resources") or []
        if not ("*" in verbs or verb in verbs) or not ("*" in groups or group in groups):
            continue
        if "*" in resources or resource in resources or (sub and f"*/{sub}" in resources):
            return True
    return False


def missing(command: str, cluster_rules: Iterable[Mapping[str, Any]],
            namespace_rules: Iterable[Mapping[str, Any]]) -> list[str]:
    """What a command needs that the rules do not allow, as `verb resource.group` strings."""
    cluster_rules, namespace_rules = list(cluster_rules), list(namespace_rules)
    out = []
    for a in COMMANDS[command]:
        rules = cluster_rules if a.where == CLUSTER else namespace_rules
        for verb in a.verbs:
            if not allowed(rules, a.group, a.resource, verb):
                out.append(f"{verb} {a.resource}{'.' + a.group if a.group else ''}")
    return out
