"""`kubevirt.installed`, `kubevirt.version`, `kubevirt.gates`: KubeVirt deployed, new enough, host-device gates on."""

from __future__ import annotations

from rblnctl import constants as C
from rblnctl.kubevirt.cr import hco_remedy
from rblnctl.kubevirt.gates import gate_state
from rblnctl.kubevirt.status import status_of, supported_kubernetes
from rblnctl.preflight.checks.common import pick, unreadable
from rblnctl.preflight.facts import ClusterFacts
from rblnctl.preflight.model import SCOPE_CLUSTER, Findings, Status
from rblnctl.remedy import Command, Remedy
from rblnctl.versions import format_version, parse_version


def check_kubevirt(f: ClusterFacts, out: Findings) -> dict | None:
    """KubeVirt installed, version, gates; returns the CR checked (None when there is none)."""
    t_inst, t_ver, t_gates = "KubeVirt installed and Deployed", "KubeVirt version", "KubeVirt feature gates"
    install = ("install KubeVirt: apply kubevirt-operator.yaml and kubevirt-cr.yaml of a release "
               "(github.com/kubevirt/kubevirt/releases), then wait for phase Deployed")
    if not f.kubevirts.ok and not f.kubevirts.absent:
        unreadable(out, "kubevirt.installed", t_inst, f.kubevirts)
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
                f"(`kubectl logs -n {st.namespace} deploy/virt-operator`)",
                f"kubectl get kubevirt -n {st.namespace} {st.name} -o yaml")

    floor = C.MIN_KUBEVIRT.get(f.method)
    v = parse_version(st.version)
    if v is None:
        seen = (f"status.observedKubeVirtVersion {st.version!r} is not a version" if st.version
                else "status.observedKubeVirtVersion is empty")
        out.add("kubevirt.version", t_ver, SCOPE_CLUSTER, Status.WARN,
                f"{ref}: {seen}, version unknown",
                "wait for virt-operator to finish deploying, then rerun")
    elif floor is None or v >= floor:
        met = (f"{st.version} >= {format_version(floor)} (dra)" if floor is not None
               else f"{st.version} (the sandbox method has no KubeVirt floor)")
        outside = _outside_support(v, f)
        if outside:
            out.add("kubevirt.version", t_ver, SCOPE_CLUSTER, Status.WARN, f"{met}; {outside}",
                    "upgrade KubeVirt (or Kubernetes) to a pair KubeVirt supports "
                    "(github.com/kubevirt/sig-release releases/k8s-support-matrix.md)")
        else:
            out.add("kubevirt.version", t_ver, SCOPE_CLUSTER, Status.PASS, met)
    else:
        out.add("kubevirt.version", t_ver, SCOPE_CLUSTER, Status.FAIL,
                f"{st.version} < {format_version(floor)}, the DRA method's floor",
                f"upgrade KubeVirt to {format_version(floor)} or later, or use the sandbox method")

    wanted = [C.GATE_HOST_DEVICES] + ([C.GATE_HOST_DEVICES_DRA] if f.method == C.METHOD_DRA else [])
    states = [gate_state(g, st.feature_gates, st.disabled_feature_gates, st.version) for g in wanted]
    evidence = "; ".join(f"{s.name}: {s.reason}" for s in states)
    command: Command | None = Command.own("kubevirt", "enable-gates", dra=f.method == C.METHOD_DRA, **pick(f, st))
    cmd = "{command}"
    # enable-gates refuses to add HostDevicesWithDRA below KubeVirt 1.9.0 or on an unknown version
    # (without --force): name the step that actually works.
    dra_write = f.method == C.METHOD_DRA and any(
        s.name == C.GATE_HOST_DEVICES_DRA and (s.disabled or not s.listed) for s in states)
    gate_floor = C.GATE_MIN_KUBEVIRT.get(C.GATE_HOST_DEVICES_DRA)
    pre = ""
    if dra_write and v is None:
        command = Command.own("kubevirt", "enable-gates", dra=True, force=True, **pick(f, st))
        cmd = "{command} (forced: the KubeVirt version is unknown)"
    elif dra_write and gate_floor and v is not None and v < gate_floor:
        pre = f"upgrade KubeVirt to {format_version(gate_floor)} or later (see kubevirt.version), then "
        command = None  # enable-gates refuses until KubeVirt is upgraded
    what = "adds them to featureGates, keeps the other gates, takes them out of disabledFeatureGates"
    # HCO puts its own featureGates back over any edit of a KubeVirt CR it manages (rblnctl.kubevirt.cr.hco_owner),
    # and `rblnctl kubevirt enable-gates` refuses such a CR: the change belongs on the HyperConverged CR.
    hco = hco_remedy(kv, "gates")
    if hco:
        command = None

    def gates(text: str) -> Remedy:  # the words, with the command where they place it (none: no `{command}`)
        return Remedy(text if command is not None else text.replace("{command}", "enable them with kubevirt "
                                                                    "enable-gates"), command)

    if any(s.effective is False for s in states):
        out.add("kubevirt.gates", t_gates, SCOPE_CLUSTER, Status.FAIL, evidence,
                gates(f"{pre}{hco or f'{cmd} ({what})'}"))
    elif any(s.effective is None for s in states):
        # Not listed, and whether the Beta default applies depends on a version we cannot read.
        out.add("kubevirt.gates", t_gates, SCOPE_CLUSTER, Status.WARN, evidence,
                gates(f"{pre}{hco or f'{cmd}: listing the gates makes them on whatever the version ({what})'}"))
    elif any(not s.listed for s in states):
        why = "the setup guide lists both gates explicitly, so a later default change cannot turn DRA off"
        out.add("kubevirt.gates", t_gates, SCOPE_CLUSTER, Status.WARN, evidence,
                gates(f"{hco}: {why}" if hco else f"{cmd}: {why}"))
    else:
        out.add("kubevirt.gates", t_gates, SCOPE_CLUSTER, Status.PASS, evidence)
    return kv


def _outside_support(kubevirt: tuple[int, int, int], f: ClusterFacts) -> str | None:
    """Why this KubeVirt does not support the cluster's Kubernetes (rblnctl.kubevirt.status.supported_kubernetes);
    None when it does, or either version is unknown."""
    k8s = parse_version((f.version.value or {}).get("gitVersion")) if f.version.ok else None
    window = supported_kubernetes(kubevirt)
    if k8s is None or window is None:
        return None
    (lo_major, lo), (_, hi), listed = window
    if lo <= k8s[1] <= hi and k8s[0] == lo_major:
        return None
    how = "its support matrix" if listed else "the pattern of its support matrix (this release is newer than it)"
    return (f"KubeVirt {kubevirt[0]}.{kubevirt[1]} supports Kubernetes 1.{lo} to 1.{hi} by {how}, and the cluster "
            f"runs {k8s[0]}.{k8s[1]}")
