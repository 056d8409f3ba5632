"""Cluster readiness for `rblnctl preflight`: every check through the API server, in a bounded number of requests.

Facts are read first (ClusterFacts: one paged list per resource type, whatever the cluster size;
NodeFeature objects are listed once for all nodes), then every check is a pure function of them.
A read the API server refuses (403) or fails (5xx) becomes a finding naming the permission or the
error; only an unreachable server or rejected credentials (401) end the run.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rblnctl import constants as C
from rblnctl.errors import AuthError, ClusterError, ClusterUnreachable, Forbidden, InvalidInput, NotFound
from rblnctl.kube import (
    CLUSTER_POLICIES,
    DAEMONSETS,
    DEPLOYMENTS,
    DEVICE_CLASSES,
    KUBEVIRTS,
    NODE_FEATURES,
    NODES,
    PODS,
    Kube,
    Resource,
)
from rblnctl.kubevirt.gates import gate_state
from rblnctl.kubevirt.status import status_of
from rblnctl.node.inventory import list_npu_node_objects
from rblnctl.operator import resources as R
from rblnctl.operator.cluster import operator_version
from rblnctl.operator.dra import dra_driver_version, is_dra_daemonset
from rblnctl.operator.nodes import mode_of
from rblnctl.operator.policy import Policy, choose_active
from rblnctl.preflight.model import (
    METHOD_AUTO,
    SCOPE_CLUSTER,
    TARGET_CLUSTER,
    CheckResult,
    Findings,
    PreflightReport,
    Status,
    make_report,
)
from rblnctl.versions import format_version, parse_version, strict_version

# Lifted to the model modules (set-method reads them too); still importable from here.
__all__ = ["ClusterPreflight", "check_cluster", "dra_driver_version", "gather", "is_dra_daemonset",
           "operator_version", "strict_version"]

log = logging.getLogger(__name__)

MODE_LABEL_REMEDY = "`rblnctl node set-mode NODE vm-passthrough` (or `container`)"
NFD_FACT_REMEDY = "run `rblnctl preflight --local` on that node, or enable NFD's {source} source"


# -- facts ---------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Fetch:
    """The outcome of one read: its value, or that the type/object is absent (404), or why it failed."""

    verb: str
    resource: str  # as RBAC names it: nodes, kubevirts.kubevirt.io
    namespace: str | None = None  # None: all namespaces / cluster scope
    value: Any = None
    absent: bool = False
    error: str | None = None
    forbidden: bool = False

    @property
    def ok(self) -> bool:
        """True when the read succeeded."""
        return not self.absent and self.error is None

    def remedy(self) -> str:
        """What to do when the read failed: the RBAC permission to grant, or the error to look into."""
        if self.forbidden:
            where = f"in namespace {self.namespace}" if self.namespace else "cluster-wide"
            flag = f"-n {self.namespace}" if self.namespace else "-A"
            return (f"grant `{self.verb}` on `{self.resource}` {where} to this user (check with "
                    f"`kubectl auth can-i {self.verb} {self.resource} {flag}`), or use a kubeconfig that has it")
        return f"the API server failed to {self.verb} {self.resource}; check its health and rerun"


def fetch(verb: str, res: Resource | str, call: Callable[[], Any], *, namespace: str | None = None) -> Fetch:
    """Run one read; turn 404 into `absent`, 403 and other API errors into `error` (never raise them).

    ClusterUnreachable and 401 propagate: no later read could succeed either.
    """
    name = res.qualified if isinstance(res, Resource) else res
    try:
        return Fetch(verb=verb, resource=name, namespace=namespace, value=call())
    except NotFound:
        return Fetch(verb=verb, resource=name, namespace=namespace, absent=True)
    except Forbidden as e:
        log.debug("%s %s refused: %s", verb, name, e)
        return Fetch(verb=verb, resource=name, namespace=namespace, error=str(e), forbidden=True)
    except (ClusterUnreachable, AuthError):
        raise
    except ClusterError as e:
        log.debug("%s %s failed: %s", verb, name, e)
        return Fetch(verb=verb, resource=name, namespace=namespace, error=str(e))


@dataclass(frozen=True, kw_only=True)
class HelmInfo:
    """The local helm client: where it is and what `helm version --short` printed."""

    path: str | None
    output: str | None = None
    error: str | None = None


def helm_client_version(*, timeout_s: float = C.HELM_TIMEOUT_S) -> HelmInfo:
    """Run `helm version --short` when helm is on PATH (argument list, no shell, with a timeout)."""
    path = shutil.which("helm")
    if path is None:
        return HelmInfo(path=None)
    try:
        out = subprocess.run([path, "version", "--short"], capture_output=True, text=True, timeout=timeout_s,
                             check=False)
    except subprocess.TimeoutExpired:
        return HelmInfo(path=path, error=f"`helm version --short` did not finish within {timeout_s:g}s")
    except OSError as e:
        return HelmInfo(path=path, error=f"cannot run {path}: {e.strerror or e}")
    if out.returncode != 0:
        lines = (out.stderr or out.stdout).strip().splitlines()
        return HelmInfo(path=path, error=f"`helm version --short` exited {out.returncode}: "
                        f"{lines[-1] if lines else 'no output'}")
    return HelmInfo(path=path, output=out.stdout.strip())


@dataclass(kw_only=True)
class ClusterFacts:
    """Everything the cluster checks read, each read once."""

    version: Fetch
    policies: Fetch
    method: str
    method_note: str
    method_status: Status
    method_remedy: str
    operator: Fetch  # Deployments that look like the operator
    kubevirts: Fetch
    nodes: Fetch  # raw NPU Node objects (or the one --node)
    node_features: Fetch
    helm: HelmInfo
    nfd_pods: Fetch | None = None  # read only when neither the NodeFeature API nor NFD labels show NFD
    daemonsets: Fetch | None = None  # DRA method only
    device_class: Fetch | None = None  # DRA method only
    node_name: str | None = None  # --node
    selector: str | None = None  # -l

    @property
    def policy(self) -> Policy | None:
        """The RBLNClusterPolicy the operator acts on (rblnctl.operator.policy.choose_active)."""
        return choose_active(self.policies.value or []).active if self.policies.ok else None


def choose_method(requested: str, policies: Fetch) -> tuple[str, str, Status, str]:
    """Return (method, how it was chosen, status of that choice, remedy) for --method."""
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
    if p.vm_method == C.METHOD_DRA:
        extra = (" (sandboxDevicePlugin is enabled too, which admission rejects)"
                 if p.is_enabled(C.COMP_SANDBOX) else "")
        return C.METHOD_DRA, f"auto: RBLNClusterPolicy {p.name} enables draKubeletPlugin{extra}", Status.PASS, ""
    if p.vm_method == C.METHOD_SANDBOX:
        return C.METHOD_SANDBOX, f"auto: RBLNClusterPolicy {p.name} enables sandboxDevicePlugin", Status.PASS, ""
    return (C.METHOD_SANDBOX,
            f"auto: RBLNClusterPolicy {p.name} enables neither sandboxDevicePlugin nor draKubeletPlugin; "
            "checking the sandbox method", Status.WARN,
            "enable one in the policy: helm upgrade ... --set sandboxDevicePlugin.enabled=true "
            "(or draKubeletPlugin.enabled=true for DRA), or pass --method")


def _is_operator_deployment(dep: dict) -> bool:
    meta = dep.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(C.APP_NAME_LABEL) == C.OPERATOR_HELM_CHART:
        return True
    if str(labels.get(C.HELM_CHART_LABEL, "")).startswith(C.OPERATOR_HELM_CHART + "-"):
        return True
    return C.OPERATOR_HELM_CHART in str(meta.get("name", ""))


def find_operator(kube: Kube) -> Fetch:
    """Operator Deployments: by label across namespaces, else by name/chart label in OPERATOR_NAMESPACE."""
    by_label = fetch("list", DEPLOYMENTS, lambda: kube.list(DEPLOYMENTS, label_selector=C.OPERATOR_DEPLOYMENT_SELECTOR))
    if by_label.ok and by_label.value:
        return by_label
    in_ns = fetch("list", DEPLOYMENTS,
                  lambda: [d for d in kube.iter_list(DEPLOYMENTS, namespace=C.OPERATOR_NAMESPACE)
                           if _is_operator_deployment(d)],
                  namespace=C.OPERATOR_NAMESPACE)
    if in_ns.ok and in_ns.value:
        return in_ns
    for attempt in (by_label, in_ns):
        if attempt.error:
            return attempt  # not found where we could look, and one place we could not: say so, never guess
    return by_label


def _node_features_by_node(items: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for nf in items:
        meta = nf.get("metadata") or {}
        node = (meta.get("labels") or {}).get(C.NFD_NODE_NAME_LABEL) or meta.get("name", "")
        out.setdefault(node, []).append(nf)
    return out


def gather(kube: Kube, *, method: str = METHOD_AUTO, node: str | None = None,
           selector: str | None = None) -> ClusterFacts:
    """Read every fact the checks need: a fixed set of reads, each one paged list or one GET."""
    version = fetch("get", "/version", kube.server_version)
    policies = fetch("list", CLUSTER_POLICIES, lambda: kube.list(CLUSTER_POLICIES))
    chosen, note, status, remedy = choose_method(method, policies)
    operator = find_operator(kube)
    kubevirts = fetch("list", KUBEVIRTS, lambda: kube.list(KUBEVIRTS))
    if node:
        nodes = fetch("get", NODES, lambda: [kube.get(NODES, node)])
        features = fetch("list", NODE_FEATURES, lambda: kube.list(
            NODE_FEATURES, label_selector=f"{C.NFD_NODE_NAME_LABEL}={node}"))
    else:
        nodes = fetch("list", NODES, lambda: _list_npu_nodes(kube, selector))
        features = fetch("list", NODE_FEATURES, lambda: kube.list(NODE_FEATURES))
    facts = ClusterFacts(
        version=version, policies=policies, method=chosen, method_note=note, method_status=status,
        method_remedy=remedy, operator=operator, kubevirts=kubevirts, nodes=nodes, node_features=features,
        helm=helm_client_version(), node_name=node, selector=selector,
    )
    if not features.ok and not _nodes_have_nfd_labels(facts):
        facts.nfd_pods = fetch("list", PODS, lambda: kube.list(PODS, label_selector=C.NFD_POD_SELECTOR))
    if chosen == C.METHOD_DRA:
        facts.daemonsets = fetch("list", DAEMONSETS, lambda: kube.list(DAEMONSETS))
        facts.device_class = fetch("get", DEVICE_CLASSES, lambda: kube.get(DEVICE_CLASSES, C.DRA_DEVICECLASS_VM))
    return facts


def _list_npu_nodes(kube: Kube, selector: str | None) -> list[dict]:
    """NPU Node objects; a selector the API server cannot parse (400) is bad input, not a finding."""
    try:
        return list_npu_node_objects(kube, selector=selector)
    except ClusterError as e:
        if selector and e.status == 400:
            raise InvalidInput(f"bad label selector {selector!r}: {e}") from e
        raise


def _nodes_have_nfd_labels(facts: ClusterFacts) -> bool:
    if not facts.nodes.ok:
        return False
    return any(k.startswith(C.NFD_LABEL_PREFIX) for n in facts.nodes.value
               for k in ((n.get("metadata") or {}).get("labels") or {}))


# -- the run -------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class ClusterPreflight:
    """Check a cluster for NPU passthrough readiness through its API server; `run()` returns the report."""

    kube: Kube
    method: str = METHOD_AUTO  # auto | sandbox | dra
    node: str | None = None  # check only this node
    selector: str | None = None  # label selector narrowing the NPU nodes
    strict: bool = False  # WARN fails too

    def __post_init__(self) -> None:
        if self.method not in (METHOD_AUTO, *C.METHODS):
            raise InvalidInput(f"unknown method {self.method!r}: expected auto, sandbox or dra")
        if self.node and self.selector:
            raise InvalidInput("give --node or --selector, not both")

    def run(self) -> PreflightReport:
        """Read the facts and check them."""
        facts = gather(self.kube, method=self.method, node=self.node, selector=self.selector)
        checks = check_cluster(facts)
        return make_report(
            target=TARGET_CLUSTER,
            method=facts.method,
            method_note=facts.method_note,
            checks=checks,
            strict=self.strict,
            nodes=len(facts.nodes.value) if facts.nodes.ok else 0,
        )


# -- checks --------------------------------------------------------------------------------------


def check_cluster(f: ClusterFacts) -> list[CheckResult]:
    """Turn cluster facts into findings: cluster-wide checks first, then per NPU node."""
    out = Findings()
    out.add("cluster.method", "Allocation method", SCOPE_CLUSTER, f.method_status,
            f"{f.method}: {f.method_note}", f.method_remedy)
    _check_kubernetes(f, out)
    _check_operator(f, out)
    _check_policy(f, out)
    kv = _check_kubevirt(f, out)
    _check_permitted_devices(f, kv, out)
    _check_dra(f, out)
    _check_helm(f, out)
    _check_nfd(f, out)
    _check_nodes(f, out)
    return out.items


def _unreadable(out: Findings, id_: str, title: str, fetch_: Fetch) -> None:
    what = "forbidden" if fetch_.forbidden else "failed"
    out.add(id_, title, SCOPE_CLUSTER, Status.WARN, f"cannot {fetch_.verb} {fetch_.resource} ({what}): "
            f"{fetch_.error}", fetch_.remedy())


def _check_kubernetes(f: ClusterFacts, out: Findings) -> None:
    title = "Kubernetes version"
    if not f.version.ok:
        _unreadable(out, "kubernetes.version", title, f.version)
        return
    text = (f.version.value or {}).get("gitVersion")
    floor = C.MIN_KUBERNETES[f.method]
    v = parse_version(text)
    if v is None:
        out.add("kubernetes.version", title, SCOPE_CLUSTER, Status.WARN, f"server reports no version ({text!r})",
                "check `kubectl version`")
    elif v >= floor:
        out.add("kubernetes.version", title, SCOPE_CLUSTER, Status.PASS,
                f"{text} >= {format_version(floor)} ({f.method})")
    else:
        fix = (f"upgrade Kubernetes to {format_version(floor)} or later"
               + (", or use the sandbox method (Kubernetes >= 1.19)" if f.method == C.METHOD_DRA else ""))
        out.add("kubernetes.version", title, SCOPE_CLUSTER, Status.FAIL,
                f"{text} < {format_version(floor)}, the {f.method} method's floor", fix)


def _check_operator(f: ClusterFacts, out: Findings) -> None:
    id_, title = "operator.version", "RBLN NPU Operator installed, version"
    floor = C.MIN_OPERATOR[f.method]
    install = (f"install or upgrade it: `helm upgrade --install rbln-npu-operator rebellions/rbln-npu-operator "
               f"-n {C.OPERATOR_NAMESPACE} --create-namespace` (>= {format_version(floor)} for {f.method})")
    if not f.operator.ok and not f.operator.absent:
        _unreadable(out, id_, title, f.operator)
        return
    deps = f.operator.value or []
    if not deps:
        crd = ("" if f.policies.absent else " (the RBLNClusterPolicy CRD is installed)" if f.policies.ok
               else " (whether the RBLNClusterPolicy CRD is installed is unknown: see operator.policy)")
        status = Status.FAIL if f.policies.absent else Status.WARN
        out.add(id_, title, SCOPE_CLUSTER, status,
                f"no operator Deployment found by {C.OPERATOR_DEPLOYMENT_SELECTOR} or in namespace "
                f"{C.OPERATOR_NAMESPACE}{crd}",
                install if status == Status.FAIL else
                f"label the operator Deployment {C.OPERATOR_DEPLOYMENT_SELECTOR}, or {install}")
        return
    dep = deps[0]
    meta = dep.get("metadata") or {}
    where = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    found = operator_version(dep)
    if found is None:
        out.add(id_, title, SCOPE_CLUSTER, Status.WARN,
                f"Deployment {where} found, version unknown (no {C.APP_VERSION_LABEL}, no {C.HELM_CHART_LABEL} "
                f"{C.OPERATOR_HELM_CHART}-X.Y.Z, no versioned image tag)",
                f"check with `helm list -A`; the {f.method} method needs >= {format_version(floor)}")
        return
    text, source = found
    v = strict_version(text)
    supported = C.OPERATOR_SUPPORTED_FROM
    if v >= floor:
        out.add(id_, title, SCOPE_CLUSTER, Status.PASS, f"{where} {text} >= {format_version(floor)} (from {source})")
    elif f.method == C.METHOD_SANDBOX and v >= supported:
        out.add(id_, title, SCOPE_CLUSTER, Status.WARN,
                f"{where} {text} < {format_version(floor)}, the documented minimum for the {f.method} method "
                f"(from {source}); rblnctl supports releases from {format_version(supported)}", install)
    else:
        out.add(id_, title, SCOPE_CLUSTER, Status.FAIL,
                f"{where} {text} < {format_version(floor)}, the {f.method} method's floor (from {source})", install)


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


def _effective_modes(f: ClusterFacts) -> dict[str, str]:
    """Node -> effective mode (rblnctl.operator.nodes.mode_of)."""
    policy = f.policy
    return {n["metadata"]["name"]: mode_of((n.get("metadata") or {}).get("labels") or {}, policy).effective
            for n in (f.nodes.value if f.nodes.ok else [])}


def _check_policy(f: ClusterFacts, out: Findings) -> None:
    id_, title = "operator.policy", "RBLNClusterPolicy consistent"
    if f.policies.absent:
        out.add(id_, title, SCOPE_CLUSTER, Status.SKIP,
                "the RBLNClusterPolicy CRD is not installed (see operator.version)")
        return
    if not f.policies.ok:
        _unreadable(out, id_, title, f.policies)
        return
    items = f.policies.value or []
    if not items:
        out.add(id_, title, SCOPE_CLUSTER, Status.FAIL, "no RBLNClusterPolicy: the operator deploys nothing",
                "create one (the operator chart does by default), e.g. `helm upgrade rbln-npu-operator ... "
                "--set vfioManager.enabled=true --set sandboxDevicePlugin.enabled=true`")
        return
    choice = choose_active(items)
    p = choice.active
    assert p is not None
    vm_nodes = sum(1 for m in _effective_modes(f).values() if m == C.MODE_VM)
    problems = policy_problems(p, method=f.method, vm_nodes=vm_nodes)
    state = f"{p.name}: {p.switches()}"
    for note in choice.notes:
        state += f" ({note})"
    if not problems:
        out.add(id_, title, SCOPE_CLUSTER, Status.PASS, state)
        return
    if f.method == C.METHOD_DRA:
        fix = ("set vfioManager.enabled=true, draKubeletPlugin.enabled=true, sandboxDevicePlugin.enabled=false and "
               "devicePlugin.enabled=false (helm upgrade ... --set ...), or edit the RBLNClusterPolicy")
    else:
        fix = ("set vfioManager.enabled=true and sandboxDevicePlugin.enabled=true with draKubeletPlugin.enabled=false "
               "(helm upgrade ... --set ...), or edit the RBLNClusterPolicy")
    out.add(id_, title, SCOPE_CLUSTER, Status.FAIL, f"{state}; " + "; ".join(problems), fix)


def _pick(f: ClusterFacts, st: Any) -> str:
    """` --name N -n NS` when several KubeVirt CRs exist (`rblnctl kubevirt` refuses to guess), else ""."""
    several = f.kubevirts.ok and len(f.kubevirts.value or []) > 1
    return f" --name {st.name} -n {st.namespace}" if several else ""


def _check_kubevirt(f: ClusterFacts, out: Findings) -> dict | None:
    """KubeVirt installed, version, gates; returns the CR checked (None when there is none)."""
    t_inst, t_ver, t_gates = "KubeVirt installed and Deployed", "KubeVirt version", "KubeVirt feature gates"
    install = ("install KubeVirt: apply kubevirt-operator.yaml and kubevirt-cr.yaml of a release "
               "(github.com/kubevirt/kubevirt/releases), then wait for phase Deployed")
    if not f.kubevirts.ok and not f.kubevirts.absent:
        _unreadable(out, "kubevirt.installed", t_inst, f.kubevirts)
        for id_, t in (("kubevirt.version", t_ver), ("kubevirt.gates", t_gates)):
            out.add(id_, t, SCOPE_CLUSTER, Status.SKIP, "the KubeVirt CR could not be read (see kubevirt.installed)")
        return None
    items = f.kubevirts.value or []
    if not items:
        why = "the kubevirts.kubevirt.io CRD is not installed" if f.kubevirts.absent else "no KubeVirt CR exists"
        out.add("kubevirt.installed", t_inst, SCOPE_CLUSTER, Status.FAIL, why, install)
        for id_, t in (("kubevirt.version", t_ver), ("kubevirt.gates", t_gates)):
            out.add(id_, t, SCOPE_CLUSTER, Status.SKIP, "KubeVirt is not installed")
        return None
    deployed = [k for k in items if (k.get("status") or {}).get("phase") == "Deployed"]
    kv = (deployed or items)[0]
    st = status_of(kv)
    ref = f"{st.namespace}/{st.name}"
    more = f" ({len(items)} KubeVirt CRs; checked {ref})" if len(items) > 1 else ""
    if st.phase == "Deployed":
        out.add("kubevirt.installed", t_inst, SCOPE_CLUSTER, Status.PASS, f"{ref} phase Deployed{more}")
    else:
        out.add("kubevirt.installed", t_inst, SCOPE_CLUSTER, Status.FAIL,
                f"{ref} phase {st.phase or 'unset'}, not Deployed{more}",
                f"see `kubectl get kubevirt -n {st.namespace} {st.name} -o yaml` and the virt-operator logs "
                f"(`kubectl logs -n {st.namespace} deploy/virt-operator`)")

    floor = C.MIN_KUBEVIRT.get(f.method)
    v = parse_version(st.version)
    if v is None:
        seen = (f"status.observedKubeVirtVersion {st.version!r} is not a version" if st.version
                else "status.observedKubeVirtVersion is empty")
        out.add("kubevirt.version", t_ver, SCOPE_CLUSTER, Status.WARN,
                f"{ref}: {seen}, version unknown",
                "wait for virt-operator to finish deploying, then rerun")
    elif floor is None:
        out.add("kubevirt.version", t_ver, SCOPE_CLUSTER, Status.PASS,
                f"{st.version} (the sandbox method needs a release compatible with the Kubernetes version)")
    elif v >= floor:
        out.add("kubevirt.version", t_ver, SCOPE_CLUSTER, Status.PASS, f"{st.version} >= {format_version(floor)} (dra)")
    else:
        out.add("kubevirt.version", t_ver, SCOPE_CLUSTER, Status.FAIL,
                f"{st.version} < {format_version(floor)}, the DRA method's floor",
                f"upgrade KubeVirt to {format_version(floor)} or later, or use the sandbox method")

    wanted = [C.GATE_HOST_DEVICES] + ([C.GATE_HOST_DEVICES_DRA] if f.method == C.METHOD_DRA else [])
    states = [gate_state(g, st.feature_gates, st.disabled_feature_gates, st.version) for g in wanted]
    evidence = "; ".join(f"{s.name}: {s.reason}" for s in states)
    cmd = "`rblnctl kubevirt enable-gates" + (" --dra" if f.method == C.METHOD_DRA else "") + _pick(f, st) + "`"
    # enable-gates refuses to add HostDevicesWithDRA below KubeVirt 1.9.0 or on an unknown version
    # (without --force): name the step that actually works.
    dra_write = f.method == C.METHOD_DRA and any(
        s.name == C.GATE_HOST_DEVICES_DRA and (s.disabled or not s.listed) for s in states)
    gate_floor = C.GATE_MIN_KUBEVIRT.get(C.GATE_HOST_DEVICES_DRA)
    pre = ""
    if dra_write and v is None:
        cmd = (f"`rblnctl kubevirt enable-gates --dra --force{_pick(f, st)}` (--force because the KubeVirt "
               "version is unknown)")
    elif dra_write and gate_floor and v < gate_floor:
        pre = f"upgrade KubeVirt to {format_version(gate_floor)} or later (see kubevirt.version), then "
    what = "adds them to featureGates, keeps the other gates, takes them out of disabledFeatureGates"
    if any(s.effective is False for s in states):
        out.add("kubevirt.gates", t_gates, SCOPE_CLUSTER, Status.FAIL, evidence, f"{pre}{cmd} ({what})")
    elif any(s.effective is None for s in states):
        # Not listed, and whether the Beta default applies depends on a version we cannot read.
        out.add("kubevirt.gates", t_gates, SCOPE_CLUSTER, Status.WARN, evidence,
                f"{pre}{cmd}: listing the gates makes them on whatever the version ({what})")
    elif any(not s.listed for s in states):
        out.add("kubevirt.gates", t_gates, SCOPE_CLUSTER, Status.WARN, evidence,
                f"{cmd}: the setup guide lists both gates explicitly, so a later default change cannot turn DRA off")
    else:
        out.add("kubevirt.gates", t_gates, SCOPE_CLUSTER, Status.PASS, evidence)
    return kv


def advertised_vm_resources(f: ClusterFacts) -> dict[str, list[str]]:
    """VM resources NPU nodes advertise (by the active policy's names) -> the nodes advertising them."""
    names = f.policy.vm_resources if f.policy else R.ResourceNames(mode=C.MODE_VM)
    return R.advertised(f.nodes.value, names) if f.nodes.ok else {}


def _check_permitted_devices(f: ClusterFacts, kv: dict | None, out: Findings) -> None:
    id_, title = "kubevirt.permitted-devices", "KubeVirt permits the RBLN NPUs"
    if f.method != C.METHOD_SANDBOX:
        out.add(id_, title, SCOPE_CLUSTER, Status.SKIP,
                "DRA allocates NPUs through ResourceClaims; permittedHostDevices is for the sandbox method")
        return
    if kv is None:
        out.add(id_, title, SCOPE_CLUSTER, Status.SKIP, "no KubeVirt CR to read (see kubevirt.installed)")
        return
    st = status_of(kv)
    permitted = {d.resource_name: d for d in st.permitted_devices}
    in_use = advertised_vm_resources(f)
    no_erp = [d.resource_name for d in st.permitted_devices if not d.external_resource_provider]
    missing = {r: ns for r, ns in in_use.items() if r not in permitted}
    names = ", ".join(f"{d.resource_name} ({d.pci_vendor_selector})" for d in st.permitted_devices) or "none"
    problems = []
    fixes = []
    if missing:
        problems.append("advertised but not permitted: " + ", ".join(
            f"{r} ({len(ns)} node{'s' if len(ns) != 1 else ''})" for r, ns in missing.items()))
        fixes.append(f"`rblnctl kubevirt permit-devices --from-cluster{_pick(f, st)}`")
    if no_erp:
        problems.append(f"externalResourceProvider is not true for {', '.join(no_erp)}: KubeVirt would start its "
                        "own device plugin beside the RBLN sandbox device plugin")
        fixes.append(f"`rblnctl kubevirt permit-devices --fix{_pick(f, st)}`")
    if problems:
        out.add(id_, title, SCOPE_CLUSTER, Status.FAIL, f"permitted: {names}; " + "; ".join(problems),
                " and ".join(fixes))
        return
    nodes_unknown = "NPU nodes could not be read (see nfd.npu-nodes), so what they advertise is unknown"
    if not permitted:
        seen = ("" if in_use else "no node advertises a rebellions.ai/RBLN-* resource yet" if f.nodes.ok
                else nodes_unknown)
        out.add(id_, title, SCOPE_CLUSTER, Status.WARN,
                f"no RBLN entry in permittedHostDevices.pciHostDevices; {seen}".rstrip("; "),
                "once the sandbox device plugin runs on a vm-passthrough node: "
                f"`rblnctl kubevirt permit-devices --from-cluster{_pick(f, st)}` "
                "(or `--resource-name rebellions.ai/RBLN-CA22_PF`)")
        return
    if not in_use:
        out.add(id_, title, SCOPE_CLUSTER, Status.PASS,
                f"permitted: {names}, externalResourceProvider true "
                f"({'no node advertises one yet' if f.nodes.ok else nodes_unknown})")
        return
    stale = [r for r in permitted if r not in in_use]
    note = f"; permitted but not advertised by any node: {', '.join(stale)}" if stale else ""
    out.add(id_, title, SCOPE_CLUSTER, Status.PASS,
            f"every advertised resource is permitted with externalResourceProvider true: "
            f"{', '.join(in_use)}{note}")


def _check_dra(f: ClusterFacts, out: Findings) -> None:
    t_drv, t_dc = "RBLN DRA driver present, version", f"DeviceClass {C.DRA_DEVICECLASS_VM}"
    if f.method != C.METHOD_DRA:
        out.add("dra.driver", t_drv, SCOPE_CLUSTER, Status.SKIP, "the sandbox method does not use the DRA driver")
        out.add("dra.deviceclass", t_dc, SCOPE_CLUSTER, Status.SKIP, "the sandbox method does not use DRA")
        return
    floor = C.MIN_DRA_DRIVER
    enable = (f"enable it: helm upgrade rbln-npu-operator ... --set draKubeletPlugin.enabled=true "
              f"(driver >= {format_version(floor)})")
    ds_fetch = f.daemonsets
    if ds_fetch is None or not ds_fetch.ok:
        if ds_fetch is not None and not ds_fetch.absent:
            _unreadable(out, "dra.driver", t_drv, ds_fetch)
        else:
            out.add("dra.driver", t_drv, SCOPE_CLUSTER, Status.FAIL, "no DaemonSets API", enable)
    else:
        base = f.policy.base_name if f.policy else C.OPERATOR_BASE_NAME
        found = [d for d in ds_fetch.value or [] if is_dra_daemonset(d, base)]
        if not found:
            out.add("dra.driver", t_drv, SCOPE_CLUSTER, Status.FAIL,
                    f"no RBLN DRA kubelet plugin DaemonSet ({C.OPERATOR_BASE_NAME}-{C.COMP_DRA}) found",
                    enable)
        else:
            ds = found[0]
            meta = ds.get("metadata") or {}
            where = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
            st = ds.get("status") or {}
            desired, ready = int(st.get("desiredNumberScheduled") or 0), int(st.get("numberReady") or 0)
            unavailable = int(st.get("numberUnavailable") or 0)
            readiness = f"{ready}/{desired} ready"
            ver = dra_driver_version(ds)
            if ver is None:
                out.add("dra.driver", t_drv, SCOPE_CLUSTER, Status.WARN,
                        f"{where} found ({readiness}), version unknown (no versioned image tag or version label)",
                        f"check the image of {where}; the DRA method needs driver >= {format_version(floor)}")
            elif strict_version(ver[0]) < floor:
                out.add("dra.driver", t_drv, SCOPE_CLUSTER, Status.FAIL,
                        f"{where} {ver[0]} < {format_version(floor)} (from {ver[1]})",
                        f"upgrade the RBLN DRA driver to {format_version(floor)} or later (upgrade the operator)")
            elif desired == 0 or ready < desired or unavailable:
                out.add("dra.driver", t_drv, SCOPE_CLUSTER, Status.WARN,
                        f"{where} {ver[0]} >= {format_version(floor)} but {readiness}",
                        "label NPU nodes vm-passthrough so the plugin is scheduled; check its pods with "
                        f"`kubectl get pods -n {meta.get('namespace', '')} -o wide`")
            else:
                out.add("dra.driver", t_drv, SCOPE_CLUSTER, Status.PASS,
                        f"{where} {ver[0]} >= {format_version(floor)} ({readiness}, from {ver[1]})")
    dc = f.device_class
    if dc is None or dc.absent:
        out.add("dra.deviceclass", t_dc, SCOPE_CLUSTER, Status.FAIL,
                f"DeviceClass {C.DRA_DEVICECLASS_VM} not found (resource.k8s.io/{C.DRA_VERSION} needs Kubernetes "
                ">= 1.34)", f"the RBLN DRA driver creates it: {enable}")
    elif not dc.ok:
        _unreadable(out, "dra.deviceclass", t_dc, dc)
    else:
        out.add("dra.deviceclass", t_dc, SCOPE_CLUSTER, Status.PASS, f"DeviceClass {C.DRA_DEVICECLASS_VM} exists")


def _check_helm(f: ClusterFacts, out: Findings) -> None:
    id_, title = "helm.version", "Helm client version"
    h = f.helm
    floor = C.MIN_HELM
    if h.path is None:
        out.add(id_, title, SCOPE_CLUSTER, Status.SKIP,
                "helm is not on PATH here (needed only where you install the operator)")
    elif h.error:
        out.add(id_, title, SCOPE_CLUSTER, Status.WARN, h.error, f"check {h.path}; the charts need Helm >= 3.9")
    else:
        v = parse_version(h.output)
        if v is None:
            out.add(id_, title, SCOPE_CLUSTER, Status.WARN, f"{h.path} printed {h.output!r}, no version",
                    "check `helm version`; the charts need Helm >= 3.9")
        elif v >= floor:
            out.add(id_, title, SCOPE_CLUSTER, Status.PASS, f"{h.output} >= {format_version(floor)}")
        else:
            out.add(id_, title, SCOPE_CLUSTER, Status.FAIL, f"{h.output} < {format_version(floor)} ({h.path})",
                    f"upgrade Helm to {format_version(floor)} or later")


def _check_nfd(f: ClusterFacts, out: Findings) -> None:
    id_, title = "nfd.installed", "Node Feature Discovery installed"
    remedy = ("install NFD: `--set nfd.enabled=true` on the operator chart, or `helm install nfd "
              "oci://registry.k8s.io/nfd/charts/node-feature-discovery -n node-feature-discovery --create-namespace`")
    nf = f.node_features
    if nf.ok:
        out.add(id_, title, SCOPE_CLUSTER, Status.PASS,
                f"NodeFeature API served; {len(nf.value or [])} NodeFeature object(s) read")
    elif nf.error:
        # NFD may well be there, but its per-node facts cannot be read: say why, with the permission.
        _unreadable(out, id_, title, nf)
    elif _nodes_have_nfd_labels(f):
        out.add(id_, title, SCOPE_CLUSTER, Status.PASS,
                f"{C.NFD_LABEL_PREFIX}* labels on NPU nodes (NodeFeature API not served)")
    elif f.nfd_pods is not None and f.nfd_pods.ok and f.nfd_pods.value:
        out.add(id_, title, SCOPE_CLUSTER, Status.PASS,
                f"{len(f.nfd_pods.value)} NFD pod(s) ({C.NFD_POD_SELECTOR}); NodeFeature API not served")
    else:
        out.add(id_, title, SCOPE_CLUSTER, Status.FAIL,
                "no NodeFeature API, no feature.node.kubernetes.io/* labels on nodes, no NFD pods", remedy)

    id_, title = "nfd.npu-nodes", "NPU nodes discovered"
    if f.node_name:
        if f.nodes.absent:
            out.add(id_, title, SCOPE_CLUSTER, Status.FAIL, f"node {f.node_name} not found",
                    "check the name with `kubectl get nodes`")
            return
        if not f.nodes.ok:
            _unreadable(out, id_, title, f.nodes)
            return
        labels = (f.nodes.value[0].get("metadata") or {}).get("labels") or {}
        marks = [k for k in (*C.NFD_NPU_LABELS, C.NPU_PRESENT_LABEL) if labels.get(k) == "true"]
        if marks:
            out.add(id_, title, SCOPE_CLUSTER, Status.PASS, f"node {f.node_name}: {', '.join(marks)}")
        else:
            out.add(id_, title, SCOPE_CLUSTER, Status.FAIL,
                    f"node {f.node_name} has none of {', '.join(C.NFD_NPU_LABELS)}",
                    "make sure NFD runs on it and its pci source reports class 12 (deviceClassWhitelist); check "
                    "`lspci -d 1eff:` on the node")
        return
    if not f.nodes.ok:
        _unreadable(out, id_, title, f.nodes)
        return
    n = len(f.nodes.value)
    if n:
        out.add(id_, title, SCOPE_CLUSTER, Status.PASS, f"{n} NPU node{'s' if n != 1 else ''} labelled by NFD")
    else:
        out.add(id_, title, SCOPE_CLUSTER, Status.FAIL,
                f"no node labelled {' or '.join(C.NFD_NPU_LABELS)}=true"
                + (f" matching {f.selector}" if f.selector else ""),
                "make sure NFD's worker runs on the NPU nodes and its pci source reports class 12; check "
                "`kubectl get nodes -L feature.node.kubernetes.io/pci-1200_1eff.present`")


# -- per node ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class NodeNfd:
    """The NFD facts of one node, merged from its NodeFeature object(s) and its labels."""

    objects: int
    sets: dict[str, set[str]] = field(default_factory=dict)  # flag/attribute feature -> element names
    attributes: dict[str, dict[str, str]] = field(default_factory=dict)
    instances: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    def elements(self, feature: str) -> set[str] | None:
        """Element names of a flag or attribute feature; None when NFD did not publish it."""
        return self.sets.get(feature)


def node_nfd(node: dict, features: list[dict]) -> NodeNfd:
    """Merge a node's NodeFeature objects (spec.features flags, attributes, instances) with its labels."""
    sets: dict[str, set[str]] = {}
    attrs: dict[str, dict[str, str]] = {}
    inst: dict[str, list[dict[str, str]]] = {}
    for nf in features:
        feats = (nf.get("spec") or {}).get("features") or {}
        for kind in ("flags", "attributes"):
            for name, body in (feats.get(kind) or {}).items():
                elements = (body or {}).get("elements") or {}
                sets.setdefault(name, set()).update(elements)
                if kind == "attributes":
                    attrs.setdefault(name, {}).update({k: str(v) for k, v in elements.items()})
        for name, body in (feats.get("instances") or {}).items():
            for el in (body or {}).get("elements") or []:
                inst.setdefault(name, []).append({k: str(v) for k, v in ((el or {}).get("attributes") or {}).items()})
    # NodeFeature spec.labels are the labels NFD asks nfd-master to put on the node; read both.
    labels: dict[str, str] = {}
    for nf in features:
        labels.update({k: str(v) for k, v in ((nf.get("spec") or {}).get("labels") or {}).items()})
    labels.update((node.get("metadata") or {}).get("labels") or {})
    return NodeNfd(objects=len(features), sets=sets, attributes=attrs, instances=inst, labels=labels)


def _is_rbln_pci(attrs: dict[str, str]) -> bool:
    return attrs.get("vendor", "").lower().removeprefix("0x") == f"{C.PCI_VENDOR_RBLN:04x}"


def iommu_fact(nfd: NodeNfd) -> tuple[bool | None, str]:
    """(IOMMU on for the NPUs?, evidence): True/False when NFD publishes it, None when it does not."""
    if nfd.labels.get(C.NFD_IOMMU_LABEL) == "true":
        return True, f"label {C.NFD_IOMMU_LABEL}=true"
    devices = nfd.instances.get(C.NFD_FEATURE_PCI)
    if not nfd.objects:
        return None, "no NodeFeature object for this node"
    if devices is None:
        return None, f"NFD publishes no {C.NFD_FEATURE_PCI} features for this node"
    npus = [d for d in devices if _is_rbln_pci(d)]
    with_group = [d for d in devices if d.get(C.NFD_PCI_IOMMU_ATTR)]
    if npus and all(d.get(C.NFD_PCI_IOMMU_ATTR) for d in npus):
        types = sorted({d[C.NFD_PCI_IOMMU_ATTR] for d in npus})
        kinds = ", ".join(types)
        return True, f"NFD {C.NFD_FEATURE_PCI}: the NPUs are in IOMMU groups ({C.NFD_PCI_IOMMU_ATTR} {kinds})"
    if npus and with_group:
        # NFD reads iommu_group/type for every device; others have it, so the NPUs really have no group.
        return False, f"NFD {C.NFD_FEATURE_PCI}: other devices have {C.NFD_PCI_IOMMU_ATTR}, the NPUs have none"
    if not npus:
        return None, f"NFD {C.NFD_FEATURE_PCI} lists no vendor {C.PCI_VENDOR_RBLN:04x} device"
    return None, (f"NFD {C.NFD_FEATURE_PCI} has no {C.NFD_PCI_IOMMU_ATTR} on any device: the IOMMU is off, "
                  "or NFD is older than v0.10")


def _check_nodes(f: ClusterFacts, out: Findings) -> None:
    nodes = f.nodes.value if f.nodes.ok else []
    modes = _effective_modes(f)
    vm = [n for n, m in modes.items() if m == C.MODE_VM]
    if nodes:
        if vm:
            out.add("nodes.vm-mode", "NPU nodes in vm-passthrough mode", SCOPE_CLUSTER, Status.PASS,
                    f"{len(vm)} of {len(nodes)} NPU nodes in {C.MODE_VM} mode")
        else:
            out.add("nodes.vm-mode", "NPU nodes in vm-passthrough mode", SCOPE_CLUSTER, Status.WARN,
                    f"none of {len(nodes)} NPU nodes is in {C.MODE_VM} mode: no VM can get an NPU yet",
                    "`rblnctl node set-mode NODE vm-passthrough` on the nodes meant for VMs")
    else:
        out.add("nodes.vm-mode", "NPU nodes in vm-passthrough mode", SCOPE_CLUSTER, Status.SKIP,
                "no NPU node to check (see nfd.npu-nodes)")
    by_node = _node_features_by_node(f.node_features.value or []) if f.node_features.ok else {}
    features_note = None
    if not f.node_features.ok:
        features_note = ("NodeFeature objects could not be read (see nfd.installed)" if not f.node_features.absent
                         else "the NodeFeature API is not served")
    for node in nodes:
        name = node["metadata"]["name"]
        nfd = node_nfd(node, by_node.get(name, []))
        _check_one_node(name, modes.get(name, C.DEFAULT_MODE), node, nfd, features_note, out)


def _check_one_node(name: str, mode: str, node: dict, nfd: NodeNfd, features_note: str | None,
                    out: Findings) -> None:
    vm_mode = mode == C.MODE_VM
    bad = Status.FAIL if vm_mode else Status.WARN
    later = "" if vm_mode else " (this node is in container mode: it matters once it switches to vm-passthrough)"

    iommu, iommu_ev = iommu_fact(nfd)
    if features_note and iommu is None:
        iommu_ev = features_note
    if iommu is True:
        out.add("node.iommu", "IOMMU enabled", name, Status.PASS, iommu_ev)
    elif iommu is False:
        out.add("node.iommu", "IOMMU enabled", name, bad, iommu_ev + later,
                "turn the IOMMU on: intel_iommu=on / amd_iommu=on on the kernel command line and VT-d / AMD-Vi in "
                "firmware; `rblnctl preflight --local` on the node names the exact parameter")
    else:
        out.add("node.iommu", "IOMMU enabled", name, Status.WARN, f"unknown: {iommu_ev}",
                NFD_FACT_REMEDY.format(source="pci") + " (NFD >= v0.10 publishes iommu_group/type)")

    _check_node_modules(name, vm_mode, nfd, features_note, out)

    cpuid = nfd.elements(C.NFD_FEATURE_CPUID)
    dmi = nfd.attributes.get(C.NFD_FEATURE_DMI) or {}
    dmi_text = " ".join(x for x in (dmi.get("sys_vendor"), dmi.get("product_name")) if x)
    title = "Bare metal, or VM with a vIOMMU"
    if cpuid is not None:
        is_vm: bool | None = C.NFD_CPUID_HYPERVISOR in cpuid
        how = f"{C.NFD_FEATURE_CPUID} {'has' if is_vm else 'lacks'} {C.NFD_CPUID_HYPERVISOR}"
    elif nfd.labels.get(C.NFD_HYPERVISOR_LABEL) == "true":
        is_vm, how = True, f"label {C.NFD_HYPERVISOR_LABEL}=true"
    else:
        is_vm, how = None, features_note or (f"NFD publishes no {C.NFD_FEATURE_CPUID} features for this node"
                                             if nfd.objects else "no NodeFeature object for this node")
    if dmi_text:
        how += f"; DMI {dmi_text}"
    if is_vm is None:
        out.add("node.viommu", title, name, Status.WARN, f"unknown: {how}", NFD_FACT_REMEDY.format(source="cpu"))
    elif not is_vm:
        out.add("node.viommu", title, name, Status.PASS, f"bare metal ({how})")
    elif iommu is True:
        out.add("node.viommu", title, name, Status.PASS, f"VM with a vIOMMU ({how}; {iommu_ev})")
    elif iommu is False:
        out.add("node.viommu", title, name, bad, f"VM without a vIOMMU ({how}; {iommu_ev}){later}",
                "give the VM a vIOMMU (libvirt `<iommu model='intel'>`, QEMU `-device intel-iommu,intremap=on`, or "
                "the cloud's vIOMMU option) and boot it with intel_iommu=on / amd_iommu=on")
    else:
        out.add("node.viommu", title, name, Status.WARN, f"VM ({how}); whether it has a vIOMMU is unknown: {iommu_ev}",
                NFD_FACT_REMEDY.format(source="pci"))

    labels = (node.get("metadata") or {}).get("labels") or {}
    raw = mode_of(labels, None).label
    title = "Workload mode label valid"
    if raw is None:
        out.add("node.mode-label", title, name, Status.PASS, f"unset: the policy's workloadType applies ({mode})")
    elif mode_of(labels, None).label_valid:
        out.add("node.mode-label", title, name, Status.PASS, f"{C.WORKLOAD_LABEL}={raw}")
    else:
        out.add("node.mode-label", title, name, Status.FAIL,
                f"{C.WORKLOAD_LABEL}={raw!r} is not container or vm-passthrough: the operator ignores it and uses "
                f"the policy default ({mode})", MODE_LABEL_REMEDY)

    skip = labels.get(C.DEPLOY_SKIP_LABEL)
    title = "Operator manages the node (npu.deploy.skip)"
    if skip == "true":
        out.add("node.deploy-skip", title, name, Status.WARN,
                f"{C.DEPLOY_SKIP_LABEL}=true: the operator deploys nothing here (no vfio-manager, no device plugin)",
                f"if not intended: `kubectl label node NODE {C.DEPLOY_SKIP_LABEL}-`")
    elif skip is not None:
        out.add("node.deploy-skip", title, name, Status.PASS,
                f"{C.DEPLOY_SKIP_LABEL}={skip!r} is not exactly \"true\", so the operator ignores it")
    else:
        out.add("node.deploy-skip", title, name, Status.PASS, f"{C.DEPLOY_SKIP_LABEL} not set")


def _check_node_modules(name: str, vm_mode: bool, nfd: NodeNfd, features_note: str | None, out: Findings) -> None:
    title = "VFIO kernel modules loaded"
    enabled = nfd.elements(C.NFD_FEATURE_ENABLED_MODULES)
    loaded = nfd.elements(C.NFD_FEATURE_LOADED_MODULES)
    fix = ("`modprobe vfio_pci` on the node (the operator's vfio-manager does it on vm-passthrough nodes); "
           "`rblnctl preflight --local` there shows the details")
    if enabled is None and loaded is None:
        why = features_note or (f"NFD publishes no {C.NFD_FEATURE_LOADED_MODULES} features for this node"
                                if nfd.objects else "no NodeFeature object for this node")
        if vm_mode:
            out.add("node.vfio-modules", title, name, Status.WARN, f"unknown: {why}",
                    NFD_FACT_REMEDY.format(source="kernel"))
        else:
            out.add("node.vfio-modules", title, name, Status.SKIP,
                    f"unknown ({why}); only vm-passthrough nodes need them")
        return
    have = (enabled or set()) | (loaded or set())
    missing = [m for m in C.VFIO_MODULES if m not in have]
    source = C.NFD_FEATURE_ENABLED_MODULES if enabled is not None else C.NFD_FEATURE_LOADED_MODULES
    if not missing:
        out.add("node.vfio-modules", title, name, Status.PASS, f"{', '.join(C.VFIO_MODULES)} (NFD {source})")
        return
    if not vm_mode:
        out.add("node.vfio-modules", title, name, Status.SKIP,
                f"{', '.join(missing)} not loaded (NFD {source}); container mode: the operator's vfio-manager loads "
                "them when the node switches to vm-passthrough")
        return
    if enabled is None:
        # kernel.loadedmodule lists loadable modules only: a built-in vfio would be missing from it.
        out.add("node.vfio-modules", title, name, Status.WARN,
                f"{', '.join(missing)} not in NFD {C.NFD_FEATURE_LOADED_MODULES} (built-in modules are not listed "
                f"there; NFD publishes no {C.NFD_FEATURE_ENABLED_MODULES})", fix)
    else:
        out.add("node.vfio-modules", title, name, Status.FAIL,
                f"{', '.join(missing)} neither loaded nor built in (NFD {C.NFD_FEATURE_ENABLED_MODULES})", fix)
