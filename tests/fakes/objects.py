"""Builders for test objects: plain dicts shaped exactly as the real APIs serialise them.

Names and label keys come from the operator's source (github.com/RBLN-SW/rbln-npu-operator: chart
deployments/rbln-npu-operator, internal/consts/consts.go) and KubeVirt's API; they are written out here
(not imported from rblnctl.constants) so that a wrong constant in the code under test cannot
make its own tests pass.
"""

from __future__ import annotations

import hashlib

import uuid
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

# --- RBLN facts (see rbln-operator.md) ------------------------------------------------------

WORKLOAD_LABEL = "rebellions.ai/npu.workload.config"
NPU_PRESENT_LABEL = "rebellions.ai/npu.present"
DEPLOY_SKIP_LABEL = "rebellions.ai/npu.deploy.skip"
DEPLOY_LABEL_PREFIX = "rebellions.ai/npu.deploy."
NPU_COUNT_LABEL = "rebellions.ai/npu.count"
NPU_PRODUCT_LABEL = "rebellions.ai/npu.product"
NPU_FAMILY_LABEL = "rebellions.ai/npu.family"
NFD_NPU_LABELS = ("feature.node.kubernetes.io/pci-1eff.present", "feature.node.kubernetes.io/pci-1200_1eff.present")
COMPONENT_LABEL = "app.kubernetes.io/component"
CONTAINER_RESOURCE = "rebellions.ai/npu"
ONE_NPU = {CONTAINER_RESOURCE: "1"}  # a container's request (or limit) of one NPU
MODE_CONTAINER = "container"
MODE_VM = "vm-passthrough"
#: Deploy labels the later operator releases set per mode (tests/fakes/releases.py has each release's).
CONTAINER_COMPONENTS = ("driver", "device-plugin", "dra-kubelet-plugin", "metrics-exporter", "rbln-smd",
                        "npu-feature-discovery", "operator-validator", "container-toolkit")
VM_COMPONENTS = ("vfio-manager", "sandbox-device-plugin", "dra-kubelet-plugin")
#: Fake-only annotations on NPU nodes: what the hardware has, for the simulated operator.
NPU_COUNT_ANNOTATION = "fake.rblnctl.io/npu-count"
NPU_PRODUCT_ANNOTATION = "fake.rblnctl.io/npu-product"

#: PCI device IDs (PF) per product.
PCI_DEVICE_IDS = {"RBLN-CA12": "1120", "RBLN-CA22": "1220", "RBLN-CA25": "1250", "RBLN-CR03": "2030"}

_TS = "2025-01-01T00:00:00Z"


def now_ts() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def stable_uid(kind: str, namespace: str | None, name: str) -> str:
    """Deterministic uid so that an owner built separately matches its dependents' ownerReferences."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"fake-k8s/{kind}/{namespace or ''}/{name}"))


def _meta(name: str, namespace: str | None = None, *, labels: Mapping[str, str] | None = None,
          annotations: Mapping[str, str] | None = None, uid_kind: str | None = None) -> dict:
    md: dict[str, Any] = {"name": name}
    if namespace is not None:
        md["namespace"] = namespace
    if uid_kind:
        md["uid"] = stable_uid(uid_kind, namespace, name)
    if labels:
        md["labels"] = dict(labels)
    if annotations:
        md["annotations"] = dict(annotations)
    return md


def vm_resource_name(product: str, function: str = "PF") -> str:
    """``rebellions.ai/RBLN-CA22_PF`` for product ``RBLN-CA22`` (or ``CA22``)."""
    p = product if product.startswith("RBLN-") else f"RBLN-{product}"
    return f"rebellions.ai/{p}_{function}"


def deploy_labels(mode: str | None, *, release: Any = None) -> dict[str, str]:
    """The deploy labels a release's operator sets on a node in `mode` (default: the later releases)."""
    from tests.fakes.releases import NEWER

    comps = (release or NEWER).components(mode or MODE_CONTAINER)
    return {DEPLOY_LABEL_PREFIX + c: "true" for c in comps}


# --- core/v1 ---------------------------------------------------------------------------------


def namespace(name: str, *, labels: Mapping[str, str] | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": _meta(name, labels={"kubernetes.io/metadata.name": name, **(labels or {})}),
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}


def node(name: str, *, labels: Mapping[str, str] | None = None, allocatable: Mapping[str, str] | None = None,
         unschedulable: bool = False, ready: bool = True, kubelet_version: str = "v1.34.1",
         taints: Iterable[dict] | None = None, annotations: Mapping[str, str] | None = None,
         capacity: Mapping[str, str] | None = None, kernel_version: str = "5.15.0-105-generic") -> dict:
    base = {"cpu": "32", "ephemeral-storage": "467144804Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
            "memory": "263782880Ki", "pods": "110"}
    alloc = {**base, **(allocatable or {})}
    cap = {**base, **(allocatable or {}), **(capacity or {})}
    taint_list = list(taints or [])
    spec: dict[str, Any] = {"podCIDR": "10.244.0.0/24", "podCIDRs": ["10.244.0.0/24"]}
    if unschedulable:
        spec["unschedulable"] = True
        if not any(t.get("key") == "node.kubernetes.io/unschedulable" for t in taint_list):
            taint_list.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": _TS})
    if taint_list:
        spec["taints"] = taint_list
    ready_cond = {"type": "Ready", "status": "True" if ready else "False",
                  "reason": "KubeletReady" if ready else "KubeletNotReady",
                  "message": "kubelet is posting ready status" if ready else "container runtime network not ready",
                  "lastHeartbeatTime": _TS, "lastTransitionTime": _TS}
    conditions = [
        {"type": t, "status": "False", "reason": r, "message": m, "lastHeartbeatTime": _TS, "lastTransitionTime": _TS}
        for t, r, m in (("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                        ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                        ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"))
    ] + [ready_cond]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": _meta(name, labels={"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                        "kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                                        "beta.kubernetes.io/arch": "amd64", **(labels or {})},
                          annotations=annotations, uid_kind="Node"),
        "spec": spec,
        "status": {
            "capacity": cap,
            "allocatable": alloc,
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": f"192.0.2.{(sum(map(ord, name)) % 250) + 1}"},
                          {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64", "bootID": stable_uid("boot", None, name),
                "containerRuntimeVersion": "containerd://1.7.27", "kernelVersion": kernel_version,
                "kubeProxyVersion": kubelet_version, "kubeletVersion": kubelet_version,
                "machineID": stable_uid("machine", None, name).replace("-", ""), "operatingSystem": "linux",
                "osImage": "Ubuntu 22.04.5 LTS", "systemUUID": stable_uid("system", None, name),
            },
        },
    }


def npu_node(name: str, *, mode: str | None = MODE_CONTAINER, npus: int = 2, product: str = "RBLN-CA22",
             labels: Mapping[str, str] | None = None, dra: bool = False, deploy: bool = True,
             release: Any = None, policy: dict | None = None, virt_handler: bool = True, **node_kwargs: Any) -> dict:
    """A node with Rebellions NPUs as NFD and the operator leave it in ``mode`` (None: no mode label,
    i.e. the policy default, container), laid out as ``release`` (default: the later releases) does under
    ``policy`` (for chart v0.3.0's resourceList names). ``deploy=False`` leaves out the npu.deploy.* labels;
    ``dra`` means DRA allocates the NPUs, so no extended resource is advertised. ``virt_handler`` (default):
    KubeVirt's virt-handler runs there (its DaemonSet goes to every node) and has labelled it
    ``kubevirt.io/schedulable=true``, which every virt-launcher's nodeSelector asks for."""
    from tests.fakes.releases import NEWER

    rel = release or NEWER
    lb: dict[str, str] = {"feature.node.kubernetes.io/pci-1200_1eff.present": "true", NPU_PRESENT_LABEL: "true",
                          NPU_FAMILY_LABEL: "rebel100" if product.startswith("RBLN-CR") else "atom"}
    if mode is not None:
        lb[WORKLOAD_LABEL] = mode
    if virt_handler:
        lb["kubevirt.io/schedulable"] = "true"
    if deploy:
        lb.update(deploy_labels(mode, release=rel))
    if mode in (None, MODE_CONTAINER):
        lb[NPU_COUNT_LABEL] = str(npus)
        lb[NPU_PRODUCT_LABEL] = product
    lb.update(labels or {})
    if dra:
        res = {}
    elif mode == MODE_VM:
        vm_res = rel.vm_resource(policy, product)
        res = {vm_res: str(npus)} if vm_res else {}
    else:
        c_res = rel.container_resource(policy, product)
        res = {c_res: str(npus)} if c_res else {}
    res.update(node_kwargs.pop("allocatable", None) or {})
    ann = {NPU_COUNT_ANNOTATION: str(npus), NPU_PRODUCT_ANNOTATION: product,
           **(node_kwargs.pop("annotations", None) or {})}
    return node(name, labels=lb, allocatable=res, annotations=ann, **node_kwargs)


def dra_only_container_node(name: str, **kw: Any) -> dict:
    """A container-mode NPU node whose NPUs the DRA kubelet plugin alone serves: the container deploy labels but
    device-plugin's (the policy may enable devicePlugin too; it is not deployed on this node), and no extended
    resource (DRA publishes ResourceSlices of rbln<N> devices instead). Keywords go to npu_node()."""
    n = npu_node(name, mode=MODE_CONTAINER, dra=True, **kw)
    n["metadata"]["labels"].pop(DEPLOY_LABEL_PREFIX + "device-plugin", None)
    return n


_OWNER_API = {"DaemonSet": "apps/v1", "ReplicaSet": "apps/v1", "StatefulSet": "apps/v1", "Deployment": "apps/v1",
              "Job": "batch/v1", "ReplicationController": "v1", "VirtualMachineInstance": "kubevirt.io/v1",
              "Node": "v1"}


def owner_ref(kind: str, name: str, namespace: str | None, *, uid: str | None = None, controller: bool = True) -> dict:
    return {"apiVersion": _OWNER_API.get(kind, "v1"), "kind": kind, "name": name,
            "uid": uid or stable_uid(kind, namespace, name), "controller": controller, "blockOwnerDeletion": True}


def pod(namespace: str, name: str, *, node: str | None = None, labels: Mapping[str, str] | None = None,
        owner_kind: str | None = None, owner_name: str | None = None, phase: str = "Running", ready: bool = True,
        requests: Mapping[str, str] | None = None, limits: Mapping[str, str] | None = None,
        volumes: Iterable[dict] | None = None, annotations: Mapping[str, str] | None = None,
        owner: str | None = None, image: str = "registry.example/app:1.0",
        containers: Iterable[dict] | None = None, tolerations: Iterable[dict] | None = None,
        node_selector: Mapping[str, str] | None = None) -> dict:
    """A pod; ``owner`` is an alias of ``owner_kind``. The owner's name defaults to the pod name
    without its last ``-suffix`` (``rbln-device-plugin-n1`` -> ``rbln-device-plugin``)."""
    owner_kind = owner_kind or owner
    container: dict[str, Any] = {"name": "main", "image": image, "imagePullPolicy": "IfNotPresent",
                                 "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = dict(requests)
    # An extended resource (rebellions.ai/...) cannot be overcommitted: a real API server wants its limit, equal
    # to the request (and defaults the request from it), so a pod asking for NPUs carries both.
    extended = {k: v for k, v in (requests or {}).items() if "/" in k and not k.startswith("kubernetes.io/")}
    limits = {**extended, **(limits or {})}
    if limits:
        resources["limits"] = dict(limits)
    container["resources"] = resources
    spec: dict[str, Any] = {"containers": list(containers) if containers is not None else [container],
                            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                            "schedulerName": "default-scheduler", "serviceAccountName": "default",
                            "enableServiceLinks": True, "priority": 0}
    if node:
        spec["nodeName"] = node
    if volumes:
        spec["volumes"] = list(volumes)
    if tolerations:
        spec["tolerations"] = list(tolerations)
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    md = _meta(name, namespace, labels=labels, annotations=annotations)
    if owner_kind:
        oname = owner_name or (name.rsplit("-", 1)[0] if "-" in name else name)
        md["ownerReferences"] = [owner_ref(owner_kind, oname, namespace)]
    is_ready = ready and phase == "Running"
    cstatus = "True" if is_ready else "False"
    conditions = [
        {"type": "PodReadyToStartContainers", "status": "True" if phase == "Running" else "False",
         "lastProbeTime": None, "lastTransitionTime": _TS},
        {"type": "Initialized", "status": "True", "lastProbeTime": None, "lastTransitionTime": _TS},
        {"type": "Ready", "status": cstatus, "lastProbeTime": None, "lastTransitionTime": _TS},
        {"type": "ContainersReady", "status": cstatus, "lastProbeTime": None, "lastTransitionTime": _TS},
        {"type": "PodScheduled", "status": "True" if node else "False", "lastProbeTime": None,
         "lastTransitionTime": _TS},
    ]
    status: dict[str, Any] = {"phase": phase, "conditions": conditions, "qosClass": _qos(requests, limits)}
    if node:
        status["hostIP"] = f"192.0.2.{(sum(map(ord, node)) % 250) + 1}"
        status["startTime"] = _TS
        status["podIP"] = f"10.244.{sum(map(ord, node)) % 250}.{(sum(map(ord, name)) % 250) + 2}"
        status["containerStatuses"] = [
            {"name": c["name"], "image": c.get("image", image), "imageID": "", "ready": is_ready, "restartCount": 0,
             "started": phase == "Running", "state": _container_state(phase)}
            for c in spec["containers"]]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec, "status": status}


def _container_state(phase: str) -> dict:
    if phase == "Running":
        return {"running": {"startedAt": _TS}}
    if phase in ("Succeeded", "Failed"):
        ok = phase == "Succeeded"
        return {"terminated": {"exitCode": 0 if ok else 1, "reason": "Completed" if ok else "Error",
                               "startedAt": _TS, "finishedAt": _TS}}
    return {"waiting": {"reason": "ContainerCreating"}}


def _qos(requests: Mapping[str, str] | None, limits: Mapping[str, str] | None) -> str:
    """The pod's QoS class as kube-apiserver computes it: from cpu and memory only (pkg/apis/core/helper/qos)."""
    requests = {k: v for k, v in (requests or {}).items() if k in ("cpu", "memory")}
    limits = {k: v for k, v in (limits or {}).items() if k in ("cpu", "memory")}
    if not requests and not limits:
        return "BestEffort"
    if {"cpu", "memory"} <= set(limits) and all(requests.get(k, v) == v for k, v in limits.items()):
        return "Guaranteed"
    return "Burstable"


def set_pod_initializing(p: dict, init_containers: Iterable[str], running: str) -> dict:
    """Put a pod in Init as the kubelet shows it while init container `running` has not finished: phase
    Pending, Initialized/Ready False, the later init containers and every app container waiting
    (PodInitializing). Returns the pod (changed in place)."""
    st = p.setdefault("status", {})
    st["phase"] = "Pending"
    spec = p.setdefault("spec", {})
    names = list(init_containers)
    spec["initContainers"] = [{"name": n, "image": "docker.io/rebellions/rbln-npu-operator-validator:v0.3.0"}
                              for n in names]
    for c in st.setdefault("conditions", []):
        if c.get("type") in ("Initialized", "Ready", "ContainersReady"):
            c["status"] = "False"
            if c["type"] == "Initialized":
                c["reason"] = "ContainersNotInitialized"
                c["message"] = f"containers with incomplete status: [{' '.join(names[names.index(running):])}]"
    st["initContainerStatuses"] = []
    for n in names:
        state = {"running": {"startedAt": _TS}} if n == running else \
            {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": _TS, "finishedAt": _TS}} \
            if names.index(n) < names.index(running) else {"waiting": {"reason": "PodInitializing"}}
        st["initContainerStatuses"].append({"name": n, "image": spec["initContainers"][0]["image"], "imageID": "",
                                            "ready": False, "restartCount": 0, "started": n == running,
                                            "state": state})
    for cs in st.get("containerStatuses") or []:
        cs.update(ready=False, started=False, state={"waiting": {"reason": "PodInitializing"}})
    return p


def set_pod_ready(p: dict, ready: bool = True) -> dict:
    """Flip a pod's Ready/ContainersReady conditions (and container ready flags) in place."""
    st = p.setdefault("status", {})
    val = "True" if ready else "False"
    conds = st.setdefault("conditions", [])
    for t in ("Ready", "ContainersReady"):
        c = next((c for c in conds if c.get("type") == t), None)
        if c is None:
            conds.append({"type": t, "status": val, "lastProbeTime": None, "lastTransitionTime": now_ts()})
        elif c.get("status") != val:
            c["status"] = val
            c["lastTransitionTime"] = now_ts()
    for cs in st.get("containerStatuses") or []:
        cs["ready"] = ready
    return p


def event(namespace: str, name: str, *, involved: dict, reason: str, message: str, type_: str = "Normal") -> dict:
    md = involved.get("metadata", {})
    return {"apiVersion": "v1", "kind": "Event", "metadata": _meta(name, namespace),
            "involvedObject": {"apiVersion": involved.get("apiVersion"), "kind": involved.get("kind"),
                               "name": md.get("name"), "namespace": md.get("namespace"), "uid": md.get("uid")},
            "reason": reason, "message": message, "type": type_, "count": 1,
            "firstTimestamp": _TS, "lastTimestamp": _TS, "source": {"component": "fake"}}


# --- apps/v1, policy/v1 ------------------------------------------------------------------------


def daemonset(namespace: str, name: str, *, node_selector: Mapping[str, str] | None = None,
              labels: Mapping[str, str] | None = None, desired: int = 1, ready: int | None = None,
              image: str = "registry.example/ds:1.0") -> dict:
    sel = dict(labels) if labels else {"app": name}
    ready = desired if ready is None else ready
    tpl_spec: dict[str, Any] = {"containers": [{"name": name, "image": image}]}
    if node_selector:
        tpl_spec["nodeSelector"] = dict(node_selector)
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": _meta(name, namespace, labels=sel, uid_kind="DaemonSet"),
        "spec": {"selector": {"matchLabels": sel}, "template": {"metadata": {"labels": sel}, "spec": tpl_spec},
                 "updateStrategy": {"type": "RollingUpdate",
                                    "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
                 "revisionHistoryLimit": 10},
        "status": daemonset_status(desired, ready),
    }


def daemonset_status(desired: int, ready: int, observed_generation: int = 1) -> dict:
    st = {"currentNumberScheduled": desired, "desiredNumberScheduled": desired, "numberMisscheduled": 0,
          "numberReady": ready, "updatedNumberScheduled": desired, "numberAvailable": ready,
          "observedGeneration": observed_generation}
    if desired - ready > 0:
        st["numberUnavailable"] = desired - ready
    if ready == 0:
        del st["numberAvailable"]
    return st


def replicaset(namespace: str, name: str, *, labels: Mapping[str, str] | None = None, replicas: int = 1) -> dict:
    sel = dict(labels) if labels else {"app": name}
    return {
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": _meta(name, namespace, labels=sel, uid_kind="ReplicaSet"),
        "spec": {"replicas": replicas, "selector": {"matchLabels": sel},
                 "template": {"metadata": {"labels": sel},
                              "spec": {"containers": [{"name": "main", "image": "registry.example/app:1.0"}]}}},
        "status": {"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas,
                   "fullyLabeledReplicas": replicas, "observedGeneration": 1},
    }


def pdb(namespace: str, name: str, *, selector: Mapping[str, Any], min_available: int | str | None = None,
        max_unavailable: int | str | None = None) -> dict:
    """A PodDisruptionBudget; ``selector`` is matchLabels, or a full LabelSelector when it has
    ``matchLabels``/``matchExpressions`` keys."""
    sel = dict(selector) if ("matchLabels" in selector or "matchExpressions" in selector) else \
        {"matchLabels": dict(selector)}
    spec: dict[str, Any] = {"selector": sel}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": _meta(name, namespace),
            "spec": spec,
            "status": {"currentHealthy": 0, "desiredHealthy": 0, "disruptionsAllowed": 0, "expectedPods": 0,
                       "observedGeneration": 1}}


# --- coordination.k8s.io/v1 -------------------------------------------------------------------


def lease(namespace: str, name: str, *, holder: str | None = None, duration_s: int = 15,
          transitions: int = 0) -> dict:
    """A Lease as leader election (client-go leaderelection) or a kubelet heartbeat writes it."""
    spec: dict[str, Any] = {"leaseDurationSeconds": duration_s, "leaseTransitions": transitions}
    if holder is not None:
        spec.update(holderIdentity=holder, acquireTime="2025-01-01T00:00:00.000000Z",
                    renewTime="2025-01-01T00:00:00.000000Z")
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": _meta(name, namespace), "spec": spec}


# --- rbac.authorization.k8s.io/v1 --------------------------------------------------------------


def policy_rule(verbs: Iterable[str], resources: Iterable[str] = (), *, groups: Iterable[str] = ("",),
                names: Iterable[str] = (), urls: Iterable[str] = ()) -> dict:
    """A PolicyRule: ``resources`` in ``groups`` (or non-resource ``urls``), optionally only ``names``."""
    rule: dict[str, Any] = {"verbs": list(verbs)}
    if urls:
        rule["nonResourceURLs"] = list(urls)
    else:
        rule.update(apiGroups=list(groups), resources=list(resources))
    if names:
        rule["resourceNames"] = list(names)
    return rule


def cluster_role(name: str, *rules: dict) -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": _meta(name),
            "rules": list(rules)}


def role(namespace: str, name: str, *rules: dict) -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(name, namespace),
            "rules": list(rules)}


# --- KubeVirt ----------------------------------------------------------------------------------


def kubevirt(namespace: str = "kubevirt", name: str = "kubevirt", *, feature_gates: Iterable[str] | None = None,
             disabled_gates: Iterable[str] | None = None, version: str = "v1.9.0", phase: str = "Deployed",
             permitted_pci: Iterable[Any] | None = None, with_configuration: bool = True) -> dict:
    """The KubeVirt CR as virt-operator's sample installs it (``featureGates: []``), then configured.
    ``permitted_pci`` entries are full dicts or ``(pciVendorSelector, resourceName)`` pairs.
    ``with_configuration=False`` leaves out ``spec.configuration`` entirely."""
    spec: dict[str, Any] = {"certificateRotateStrategy": {}, "customizeComponents": {},
                            "imagePullPolicy": "IfNotPresent", "workloadUpdateStrategy": {}}
    if with_configuration:
        dev: dict[str, Any] = {"featureGates": list(feature_gates or [])}
        if disabled_gates is not None:
            dev["disabledFeatureGates"] = list(disabled_gates)
        conf: dict[str, Any] = {"developerConfiguration": dev}
        if permitted_pci is not None:
            conf["permittedHostDevices"] = {"pciHostDevices": [_pci_host_device(p) for p in permitted_pci]}
        spec["configuration"] = conf
    deployed = phase == "Deployed"
    conds = [
        {"type": "Available", "status": "True" if deployed else "False", "reason": "AllComponentsReady",
         "message": "All components are ready.", "lastProbeTime": _TS, "lastTransitionTime": _TS},
        {"type": "Progressing", "status": "False" if deployed else "True", "reason": "AllComponentsReady",
         "message": "All components are ready.", "lastProbeTime": _TS, "lastTransitionTime": _TS},
        {"type": "Degraded", "status": "False", "reason": "AllComponentsReady",
         "message": "All components are ready.", "lastProbeTime": _TS, "lastTransitionTime": _TS},
    ]
    status: dict[str, Any] = {"phase": phase, "conditions": conds, "defaultArchitecture": "amd64",
                              "observedGeneration": 1, "operatorVersion": version,
                              "outdatedVirtualMachineInstanceWorkloads": 0,
                              "targetKubeVirtRegistry": "quay.io/kubevirt",
                              "targetKubeVirtVersion": version}
    if deployed:
        status["observedKubeVirtRegistry"] = "quay.io/kubevirt"
        status["observedKubeVirtVersion"] = version
        status["observedDeploymentID"] = stable_uid("deploy", namespace, name).replace("-", "")[:40]
    return {"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
            "metadata": _meta(name, namespace, uid_kind="KubeVirt"), "spec": spec, "status": status}


def hco_kubevirt(namespace: str = "kubevirt-hyperconverged", hyperconverged: str = "kubevirt-hyperconverged",
                 **kw: Any) -> dict:
    """The KubeVirt CR as the HyperConverged Cluster Operator deploys it: named kubevirt-<HyperConverged>, in
    its namespace, labelled by HCO (kubevirt/hyperconverged-cluster-operator@v1.18.1 pkg/util/util.go GetLabels,
    controllers/handlers/kubevirt.go NewKubeVirtWithNameOnly). No owner reference: HCO sets none on it."""
    kv = kubevirt(namespace, f"kubevirt-{hyperconverged}", **kw)
    kv["metadata"]["labels"] = {"app": hyperconverged, "app.kubernetes.io/managed-by": "hco-operator",
                                "app.kubernetes.io/part-of": "hyperconverged-cluster",
                                "app.kubernetes.io/component": "compute", "app.kubernetes.io/version": "1.18.1"}
    return kv


def _pci_host_device(p: Any) -> dict:
    if isinstance(p, dict):
        return dict(p)
    selector, resource = p
    return {"pciVendorSelector": selector, "resourceName": resource, "externalResourceProvider": True}


def _host_devices(host_devices: Iterable[Any] | None) -> list[dict]:
    out = []
    for i, d in enumerate(host_devices or []):
        out.append(dict(d) if isinstance(d, dict) else {"name": f"npu{i}", "deviceName": d})
    return out


def vm_claim(namespace: str, name: str) -> str:
    """The pod-level claim name rblnctl gives the DRA NPUs of VM namespace/name, computed here independently:
    rbln-npu- and the first 10 hex digits of sha256("namespace/name") (docs/vm.md, Claim names)."""
    return "rbln-npu-" + hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:10]


def dra_host_device(name: str, claim: str = "rbln-npu", request: str = "npu0") -> dict:
    """A DRA hostDevices entry (KubeVirt >= 1.6: ClaimRequest inlined, no deviceName)."""
    return {"name": name, "claimName": claim, "requestName": request}


def template_claim(name: str, template: str) -> dict:
    """A resourceClaims entry of a VMI spec naming a ResourceClaimTemplate."""
    return {"name": name, "resourceClaimTemplateName": template}


def vm(namespace: str, name: str, *, host_devices: Iterable[Any] | None = None, running: bool = True,
       run_strategy: str | None = None, resource_claims: Iterable[dict] | None = None,
       node_selector: Mapping[str, str] | None = None, tolerations: Iterable[dict] | None = None,
       affinity: dict | None = None, node: str | None = None, printable_status: str | None = None) -> dict:
    """A VirtualMachine. ``host_devices`` are full dicts or deviceName strings (named npu0, npu1...).
    ``node`` is where a simulated VMI runs (``simulate_kubevirt``: annotation fake.rblnctl.io/node);
    ``printable_status`` overrides the one the run strategy implies (e.g. ``ErrorUnschedulable``)."""
    tpl_spec: dict[str, Any] = {
        "domain": {"devices": {"disks": [{"name": "rootdisk", "disk": {"bus": "virtio"}}],
                               "interfaces": [{"name": "default", "masquerade": {}}]},
                   "resources": {"requests": {"memory": "4Gi"}}},
        "networks": [{"name": "default", "pod": {}}],
        "volumes": [{"name": "rootdisk", "containerDisk": {"image": "quay.io/containerdisks/ubuntu:22.04"}}],
    }
    hd = _host_devices(host_devices)
    if hd:
        tpl_spec["domain"]["devices"]["hostDevices"] = hd
    if resource_claims:
        tpl_spec["resourceClaims"] = list(resource_claims)
    if node_selector:
        tpl_spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        tpl_spec["tolerations"] = list(tolerations)
    if affinity:
        tpl_spec["affinity"] = dict(affinity)
    strategy = run_strategy or ("Always" if running else "Halted")
    is_running = strategy in ("Always", "RerunOnFailure") and running
    md = _meta(name, namespace, uid_kind="VirtualMachine",
               annotations={"fake.rblnctl.io/node": node} if node else None)
    return {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": md,
        "spec": {"runStrategy": strategy,
                 "template": {"metadata": {"labels": {"kubevirt.io/vm": name}}, "spec": tpl_spec}},
        "status": {"printableStatus": printable_status or ("Running" if is_running else "Stopped"),
                   "ready": is_running and printable_status in (None, "Running"),
                   "created": is_running, "desiredGeneration": 1, "observedGeneration": 1,
                   "runStrategy": strategy},
    }


def vmi(namespace: str, name: str, node: str | None, host_devices: Iterable[Any] | None = None, *,
        phase: str = "Running", resource_claims: Iterable[dict] | None = None,
        conditions: Iterable[dict] | None = None, eviction_strategy: str | None = None,
        standalone: bool = False) -> dict:
    """A VirtualMachineInstance on ``node`` (None: not scheduled yet; owned by the VM of the same name, unless
    ``standalone``: created directly, as `kubectl create -f vmi.yaml` does, with no owner).
    ``conditions`` are added to the Ready condition (e.g. Synchronized False with reason FailedCreate).
    ``phase`` is any of KubeVirt's VMI phases (Pending, Scheduling, Scheduled, Running, Succeeded, Failed,
    Unknown: staging/src/kubevirt.io/api/core/v1/types.go VirtualMachineInstancePhase); the ones before Running
    have no node yet, except Scheduled.

    As virt-controller reports it: LiveMigratable False (reason HostDeviceNotLiveMigratable) when it passes
    host devices or claims through, else True (kubevirt pkg/virt-controller/watch/vmi/ live-migration
    conditions); ``spec.evictionStrategy`` only when given (else the KubeVirt CR's default applies)."""
    devices: dict[str, Any] = {"disks": [{"name": "rootdisk", "disk": {"bus": "virtio"}}]}
    hd = _host_devices(host_devices)
    if hd:
        devices["hostDevices"] = hd
    labels = {"kubevirt.io/vm": name, **({"kubevirt.io/nodeName": node} if node else {})}
    md = _meta(name, namespace, labels=labels, uid_kind="VirtualMachineInstance")
    if standalone:
        del md["labels"]["kubevirt.io/vm"]  # copied from a VM's template labels (vm() sets it): none here
    else:
        md["ownerReferences"] = [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": name,
                                  "uid": stable_uid("VirtualMachine", namespace, name), "controller": True,
                                  "blockOwnerDeletion": True}]
    spec: dict[str, Any] = {"domain": {"devices": devices, "resources": {"requests": {"memory": "4Gi"}}}}
    if eviction_strategy:
        spec["evictionStrategy"] = eviction_strategy
    if resource_claims:
        spec["resourceClaims"] = list(resource_claims)
    passthrough = bool(hd or resource_claims)
    migratable = {"type": "LiveMigratable", "status": "False" if passthrough else "True", "lastProbeTime": None,
                  "lastTransitionTime": _TS, **({"reason": "HostDeviceNotLiveMigratable",
                                                 "message": "VMI uses a PCI host devices"} if passthrough else {})}
    status: dict[str, Any] = {"phase": phase,
                              "conditions": [{"type": "Ready", "status": "True" if phase == "Running" else "False",
                                              "lastProbeTime": None, "lastTransitionTime": _TS}, migratable,
                                             *(conditions or [])],
                              "migrationMethod": "BlockMigration", "qosClass": "Burstable"}
    if node:
        status["nodeName"] = node
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "metadata": md, "spec": spec,
            "status": status}



def rblnctl_dra_devices(namespace: str, name: str, npus: int, template: str | None = None
                        ) -> tuple[list[dict], list[dict]]:
    """(hostDevices, resourceClaims) of a VMI spec as `rblnctl vm attach --method dra` writes them for VM
    namespace/name: host devices npu0.. on rblnctl's claim (vm_claim), requests npu0..; the claim names the
    ResourceClaimTemplate ``template`` (default rbln-npu-<npus>). docs/vm.md "Claim names"."""
    claim = vm_claim(namespace, name)
    devices = [dra_host_device(f"npu{i}", claim, f"npu{i}") for i in range(npus)]
    return devices, [template_claim(claim, template or f"rbln-npu-{npus}")]


def dra_vm(namespace: str, name: str, npus: int, *, template: str | None = None, running: bool = False,
           **kw: Any) -> dict:
    """A VirtualMachine with ``npus`` NPUs through rblnctl's DRA claim, naming ResourceClaimTemplate ``template``
    (default rbln-npu-<npus>); stopped unless ``running``. Other keywords go to vm()."""
    devices, claims = rblnctl_dra_devices(namespace, name, npus, template)
    return vm(namespace, name, host_devices=devices, resource_claims=claims, running=running, **kw)


def dra_vmi(namespace: str, name: str, node: str | None, npus: int, *, template: str | None = None,
            **kw: Any) -> dict:
    """A VirtualMachineInstance whose spec names rblnctl's ResourceClaimTemplate ``template`` (default
    rbln-npu-<npus>) for ``npus`` NPUs: the instance of a dra_vm(), or with ``standalone=True`` a VMI made by
    hand. A running VMI keeps the spec it started with, so it may name a template its VM no longer does.
    Other keywords (phase, standalone...) go to vmi()."""
    devices, claims = rblnctl_dra_devices(namespace, name, npus, template)
    return vmi(namespace, name, node, devices, resource_claims=claims, **kw)

# The volumes virt-controller gives every virt-launcher pod (hotplug on, no ImageVolume gate, no hugepages,
# sidecars or virtiofs): kubevirt/kubevirt@v1.8.4 pkg/virt-controller/services/rendervolumes.go Volumes() and
# withHotplugSupport, all emptyDirs.
LAUNCHER_VOLUMES = tuple({"name": n, "emptyDir": {}} for n in (
    "private", "public", "sockets", "virt-bin-share-dir", "libvirt-runtime", "ephemeral-disks", "container-disks",
    "hotplug-disks"))


def virt_launcher(namespace: str, vmi_name: str, node: str | None, *, resources: Mapping[str, str] | None = None,
                  suffix: str = "abcde", claims: Mapping[str, str | None] | None = None,
                  extra_volumes: Iterable[dict] | None = None) -> dict:
    """The virt-launcher pod of a VMI (controller ownerReference to the VMI; ``kubevirt.io/created-by`` is
    the VMI's uid as ``vmi()`` builds it), with KubeVirt's own emptyDir volumes (``LAUNCHER_VOLUMES``) and
    ``extra_volumes`` after them. ``node`` None: Pending, not scheduled. ``claims`` maps the
    VMI's resourceClaims names to the ResourceClaims made for the pod (None: not made yet), as
    ``spec.resourceClaims`` + ``status.resourceClaimStatuses``."""
    p = pod(namespace, f"virt-launcher-{vmi_name}-{suffix}", node=node, phase="Running" if node else "Pending",
            labels={"kubevirt.io": "virt-launcher", "vm.kubevirt.io/name": vmi_name,
                    "kubevirt.io/created-by": stable_uid("VirtualMachineInstance", namespace, vmi_name)},
            owner_kind="VirtualMachineInstance", owner_name=vmi_name, requests=resources, limits=resources,
            annotations={"kubevirt.io/domain": vmi_name},
            volumes=[*LAUNCHER_VOLUMES, *(extra_volumes or [])])
    p["spec"]["containers"][0]["name"] = "compute"
    for cs in p["status"].get("containerStatuses") or []:
        cs["name"] = "compute"
    if claims:
        p["spec"]["resourceClaims"] = [{"name": k, "resourceClaimTemplateName": f"{k}-template"} for k in claims]
        p["status"]["resourceClaimStatuses"] = [{"name": k, **({"resourceClaimName": v} if v else {})}
                                                for k, v in claims.items()]
    return p


def failed_scheduling(pod_obj: dict, message: str, *, name: str | None = None) -> dict:
    """The Warning event kube-scheduler records for a pod it cannot place (reason FailedScheduling)."""
    md = pod_obj["metadata"]
    ev = event(md["namespace"], name or f"{md['name']}.fs0001", involved=pod_obj, reason="FailedScheduling",
               message=message, type_="Warning")
    ev["source"] = {"component": "default-scheduler"}
    ev["reportingComponent"] = "default-scheduler"
    return ev


# --- RBLN operator, NFD, DRA, CRDs ---------------------------------------------------------------


def cluster_policy(name: str = "rbln-cluster-policy", *, workload_type: str = "container", vfio_manager: bool = True,
                   sandbox: bool = True, dra: bool = False, device_plugin: bool = True) -> dict:
    """An RBLNClusterPolicy (rebellions.ai/v1beta1, cluster-scoped) with the spec keys of
    api/v1beta1/rblnclusterpolicy_types.go."""
    return {
        "apiVersion": "rebellions.ai/v1beta1", "kind": "RBLNClusterPolicy",
        "metadata": _meta(name, uid_kind="RBLNClusterPolicy"),
        "spec": {
            "workloadType": workload_type,
            "vfioManager": {"enabled": vfio_manager},
            "sandboxDevicePlugin": {"enabled": sandbox},
            "devicePlugin": {"enabled": device_plugin},
            "draKubeletPlugin": {"enabled": dra, "driverName": "npu.rebellions.ai"},
            "metricsExporter": {"enabled": True},
            "npuFeatureDiscovery": {"enabled": True},
            "containerToolkit": {"enabled": True},
            "rblnDaemon": {"enabled": False},  # required by the v0.3.0 CRD (as are the seven above); off as before
            "validator": {},
            "driver": {"useRBLNDriverCRD": True},  # v0.3.0's driver has no `enabled` (the CRD prunes it)
        },
        "status": {"state": "ready"},
    }


def node_feature(node: str, *, namespace: str = "node-feature-discovery",
                 modules: Iterable[str] = ("rebellions", "vfio", "vfio_pci", "vfio_iommu_type1", "kvm", "kvm_intel"),
                 pci_devices: Iterable[Mapping[str, str]] | None = None,
                 kernel_version: str = "5.15.0-105-generic", iommu: bool = True) -> dict:
    """An NFD NodeFeature (nfd.k8s-sigs.io/v1alpha1) named after its node, in NFD's namespace.
    ``pci_devices`` entries: ``{"vendor": "1eff", "device": "1220", "class": "1200"}``."""
    if pci_devices is None:
        pci_devices = [{"vendor": "1eff", "device": "1220", "class": "1200"}] * 2
    m = kernel_version.split("-")[0].split(".")
    kv = {"full": kernel_version, "major": m[0], "minor": m[1] if len(m) > 1 else "0",
          "revision": m[2] if len(m) > 2 else "0"}
    labels = {f"feature.node.kubernetes.io/kernel-version.{k}": v for k, v in kv.items()}
    classes = {(d["class"], d["vendor"]) for d in pci_devices}
    for cls, vendor in classes:
        labels[f"feature.node.kubernetes.io/pci-{cls}_{vendor}.present"] = "true"
    if iommu:
        labels["feature.node.kubernetes.io/iommu-enabled"] = "true"
    return {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeature",
        "metadata": _meta(node, namespace, labels={"nfd.node.kubernetes.io/node-name": node}),
        "spec": {
            "features": {
                "flags": {},
                "attributes": {
                    "kernel.loadedmodule": {"elements": {mod: "" for mod in modules}},
                    "kernel.version": {"elements": kv},
                },
                "instances": {"pci.device": {"elements": [{"attributes": dict(d)} for d in pci_devices]}},
            },
            "labels": labels,
        },
    }


def deviceclass(name: str, *, driver: str = "npu.rebellions.ai") -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": _meta(name),
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}}


def resource_slice(node: str, *, driver: str = "npu.rebellions.ai", devices: Iterable[dict] | None = None,
                   name: str | None = None) -> dict:
    devs = list(devices) if devices is not None else [
        {"name": "vfio-0000-3b-00-0", "attributes": {
            "resource.kubernetes.io/pciBusID": {"string": "0000:3b:00.0"}, "iommuGroup": {"int": 42},
            "pciDeviceID": {"string": "1220"}, "productName": {"string": "RBLN-CA22"}}}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": _meta(name or f"{node}-{driver}-slice"),
            "spec": {"driver": driver, "nodeName": node, "pool": {"name": node, "generation": 1,
                                                                   "resourceSliceCount": 1},
                     "devices": devs}}


def resource_claim_template(namespace: str, name: str, *, npus: int = 1,
                            device_class: str = "vfio-npu.rebellions.ai", managed: bool = True) -> dict:
    """A ResourceClaimTemplate (resource.k8s.io/v1) with ``npus`` requests npu0.. of one device each,
    labelled as rblnctl's when ``managed``."""
    requests = [{"name": f"npu{i}", "exactly": {"deviceClassName": device_class, "allocationMode": "ExactCount",
                                                 "count": 1}} for i in range(npus)]
    labels = {"app.kubernetes.io/managed-by": "rblnctl"} if managed else None
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": _meta(name, namespace, labels=labels, uid_kind="ResourceClaimTemplate"),
            "spec": {"spec": {"devices": {"requests": requests}}}}


def resource_claim(namespace: str, name: str, *, npus: int = 1, device_class: str = "vfio-npu.rebellions.ai",
                   allocated: Iterable[tuple[str, str]] | None = None, driver: str = "npu.rebellions.ai",
                   pod: dict | None = None) -> dict:
    """A ResourceClaim as the resourceclaim controller makes it from a template (for ``pod``: owner and
    annotation). ``allocated`` (node, device) pairs, one per request, give it ``status.allocation`` as the
    scheduler writes it (results per request, a node selector) and reserve it for the pod; None: unallocated."""
    requests = [{"name": f"npu{i}", "exactly": {"deviceClassName": device_class, "allocationMode": "ExactCount",
                                                 "count": 1}} for i in range(npus)]
    md = _meta(name, namespace, uid_kind="ResourceClaim")
    status: dict[str, Any] = {}
    if pod is not None:
        pmd = pod["metadata"]
        md["annotations"] = {"resource.kubernetes.io/pod-claim-name": "rbln-npu"}
        md["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": pmd["name"],
                                  "uid": pmd.get("uid") or stable_uid("Pod", namespace, pmd["name"]),
                                  "controller": True, "blockOwnerDeletion": True}]
    if allocated is not None:
        pairs = list(allocated)
        nodes = sorted({n for n, _ in pairs})
        status["allocation"] = {
            "devices": {"results": [{"request": f"npu{i}", "driver": driver, "pool": n, "device": d}
                                    for i, (n, d) in enumerate(pairs)]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": nodes}]}]},
            "allocationTimestamp": _TS,
        }
        if pod is not None:
            status["reservedFor"] = [{"resource": "pods", "name": pod["metadata"]["name"],
                                      "uid": pod["metadata"].get("uid") or stable_uid("Pod", namespace,
                                                                                     pod["metadata"]["name"])}]
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": md,
           "spec": {"devices": {"requests": requests}}}
    if status:
        obj["status"] = status
    return obj


def crd(plural: str, group: str, kind: str, scope: str = "Namespaced", *, versions: Iterable[str] = ("v1",),
        short_names: Iterable[str] = ()) -> dict:
    vs = list(versions)
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": _meta(f"{plural}.{group}"),
        "spec": {
            "group": group, "scope": scope,
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List",
                      **({"shortNames": list(short_names)} if short_names else {})},
            "versions": [{"name": v, "served": True, "storage": i == 0,
                          "schema": {"openAPIV3Schema": {"type": "object",
                                                         "x-kubernetes-preserve-unknown-fields": True}},
                          "subresources": {"status": {}}} for i, v in enumerate(vs)],
        },
        "status": {
            "acceptedNames": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
            "conditions": [{"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                            "message": "no conflicts found", "lastTransitionTime": _TS},
                           {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                            "message": "the initial names have been accepted", "lastTransitionTime": _TS}],
            "storedVersions": vs[:1],
        },
    }
