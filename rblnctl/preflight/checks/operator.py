"""`operator.version`: the RBLN NPU Operator Deployment is there, at a release the method supports."""

from __future__ import annotations

from rblnctl import constants as C
from rblnctl.preflight.checks.common import unreadable
from rblnctl.preflight.facts import ClusterFacts
from rblnctl.preflight.model import SCOPE_CLUSTER, Findings, Status
from rblnctl.operator.release import operator_version  # shared with policy set-method
from rblnctl.operator.install import install_command
from rblnctl.operator.release import ASSUMED, release_of
from rblnctl.versions import format_version, strict_version


def check_operator(f: ClusterFacts, out: Findings) -> None:
    """Installed, at a release whose VM allocator for the method serves vm-passthrough nodes
    (rblnctl.operator.release: sandbox from 0.4.4, DRA from 0.6.0; below it FAILs), and at the method's
    documented minimum (MIN_OPERATOR; between the supported floor and it, sandbox warns). An unknown
    version warns, naming what rblnctl assumes."""
    id_, title = "operator.version", "RBLN NPU Operator installed, version"
    floor = C.MIN_OPERATOR[f.method]
    install_cmd = install_command()
    allocator = C.COMP_DRA if f.method == C.METHOD_DRA else C.COMP_SANDBOX
    install = f"install or upgrade it: `{install_cmd}` (>= {format_version(floor)} for {f.method})"
    if not f.operator.ok and not f.operator.absent:
        unreadable(out, id_, title, f.operator)
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
                f"label the operator Deployment {C.OPERATOR_DEPLOYMENT_SELECTOR}, or {install}",
                install_cmd if status == Status.FAIL else "")
        return
    dep = deps[0]
    meta = dep.get("metadata") or {}
    where = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    found = operator_version(dep)
    v = strict_version(found[0]) if found is not None else None
    if found is None or v is None:  # operator_version finds strict versions only: v is None only without one
        assumed = ASSUMED.format(allocator=allocator, floor=format_version(C.VM_ALLOCATOR_FROM[allocator]))
        out.add(id_, title, SCOPE_CLUSTER, Status.WARN,
                f"Deployment {where} found, version unknown (no {C.APP_VERSION_LABEL}, no {C.HELM_CHART_LABEL} "
                f"{C.OPERATOR_HELM_CHART_OCI}-X.Y.Z or {C.OPERATOR_HELM_CHART_LEGACY}-X.Y.Z, no versioned image tag); "
                f"{assumed}",
                f"check with `helm list -A`; the {f.method} method needs >= {format_version(floor)}", "helm list -A")
        return
    text, source = found
    supported = C.OPERATOR_SUPPORTED_FROM
    release = release_of([dep])
    why = release.why(allocator) if v >= supported else None
    if why:
        # The release deploys the method's plugin, but it never hands NPUs to VMs (rblnctl.operator.release).
        out.add(id_, title, SCOPE_CLUSTER, Status.FAIL, f"{why} (from {source})",
                f"{release.remedy(allocator)}; upgrade with `{install_cmd}`", install_cmd)
    elif v >= floor:
        out.add(id_, title, SCOPE_CLUSTER, Status.PASS, f"{where} {text} >= {format_version(floor)} (from {source})")
    elif f.method == C.METHOD_SANDBOX and v >= supported:
        out.add(id_, title, SCOPE_CLUSTER, Status.WARN,
                f"{where} {text} < {format_version(floor)}, the documented minimum for the {f.method} method "
                f"(from {source}); rblnctl supports releases from {format_version(supported)}", install, install_cmd)
    else:
        out.add(id_, title, SCOPE_CLUSTER, Status.FAIL,
                f"{where} {text} < {format_version(floor)}, the {f.method} method's floor (from {source})", install,
                install_cmd)


def check_release_line(f: ClusterFacts, out: Findings) -> None:
    """`operator.line.sandbox`, `operator.line.dra`: the operator line the cluster runs (rblnctl.operator.lines) and,
    one line each, whether the sandbox method and DRA work on it. The checked method: PASS works, FAIL does not,
    WARN depends or the line is unknown; the other method: PASS works, else SKIP (said, not judged)."""
    from rblnctl.operator.lines import NO, WORKS, identify, verdicts

    deps = (f.operator.value or []) if f.operator.ok else []
    policy = f.policy
    raw = next((p for p in (f.policies.value or []) if policy is not None
                and (p.get("metadata") or {}).get("name") == policy.name), None) if f.policies.ok else None
    daemonsets = (f.daemonsets.value or []) if f.daemonsets is not None and f.daemonsets.ok else []
    found = identify(release_of(deps).version, policy_obj=raw, daemonsets=daemonsets, nodes=f.npu_nodes,
                     base_name=policy.base_name if policy else C.OPERATOR_BASE_NAME)
    from rblnctl.operator.dra import dra_driver_version, is_dra_daemonset

    base = policy.base_name if policy else C.OPERATOR_BASE_NAME
    drv = next((v for ds in daemonsets if is_dra_daemonset(ds, base) and (v := dra_driver_version(ds))), None)
    version_failed = any(r.id == "operator.version" and r.status == Status.FAIL for r in out.items)
    for method, (verdict, text) in verdicts(found, strict_version(drv[0]) if drv else None).items():
        title = f"What the operator line serves: {method}"
        if verdict is None and not deps:  # no operator Deployment: operator.version says so already
            status = Status.SKIP
        elif method == f.method and verdict == NO and version_failed:
            # One FAIL per cause: operator.version already fails the release for this method, with its remedy.
            status, text = Status.SKIP, f"{text} (operator.version fails for this)"
        elif method == f.method:
            status = Status.PASS if verdict == WORKS else Status.FAIL if verdict == NO else Status.WARN
        else:
            status = Status.PASS if verdict == WORKS else Status.SKIP
        other = C.METHOD_DRA if method == C.METHOD_SANDBOX else C.METHOD_SANDBOX
        if status not in (Status.WARN, Status.FAIL):
            remedy = ""
        elif verdict is None:
            remedy = (f"let the operator Deployment carry its version ({C.APP_VERSION_LABEL}, or a versioned image "
                      "tag) so rblnctl can tell its line (docs/operator.md, Release matrix)")
        elif method == C.METHOD_SANDBOX:
            remedy = (f"upgrade the operator to >= {format_version(C.VM_ALLOCATOR_FROM[C.COMP_SANDBOX])}: "
                      f"`{install_command()}`")
        else:
            remedy = (f"run a DRA driver >= {format_version(C.MIN_DRA_DRIVER)} from Rebellions "
                      f"(draKubeletPlugin.version) on the vfio/DRA line, or use the {other} method "
                      f"(policy set-method {other})")
        out.add(f"operator.line.{method}", title, SCOPE_CLUSTER, status, text, remedy)
