"""What the kubelet and the scheduler do to pods, simplified to what a test needs to drive.

* ``kubelet`` (a test's callable) is called with every pod that appears with ``spec.nodeName`` or
  gets one (created, seeded, bound), after commit and outside the lock, so it can "run" the pod.
* ``set_pod_phase`` writes the status a kubelet would report for a phase: containerStatuses
  (waiting with a reason such as ``ErrImagePull``, running, terminated with an exit code),
  the kubelet-owned conditions, IPs and times.
* ``GET pods/NAME/log`` of a pod on a node whose preferred address (kube-apiserver's default order:
  Hostname, InternalDNS, InternalIP...) is loopback goes to that node's kubelet as kube-apiserver
  sends it: ``GET https://ADDR:PORT/containerLogs/NS/POD/CONTAINER`` (``daemonEndpoints.kubeletEndpoint.Port``,
  10250 when unset; certificate not verified), relaying the text, the kubelet's refusal as a Status of its
  code and words (404: "the server could not find the requested resource ( pods/log NAME)"), a refused
  dial as a 500 naming the URL: a simulated kubelet serves it (tests/cluster/kubelet_endpoint.py). For
  any other node the fake is that kubelet itself:
* ``set_pod_log`` gives a container a log; ``GET pods/NAME/log`` answers it as ``text/plain``
  (``tailLines`` honoured; ``follow``, ``limitBytes``, ``sinceSeconds`` ignored). Without a log
  the answer follows the apiserver's container check (pkg/registry/core/pod/strategy.go
  ``validateContainer``) and the kubelet's (pkg/kubelet/kubelet_pods.go
  ``validateContainerLogStatus``): a waiting container is a 400 ``container "X" in pod "Y" is
  waiting to start: ContainerCreating`` (``image can't be pulled`` for ErrImagePull), a pod on no
  node an empty log. As on a real node, a waiting container shows no log even when one was set.
* ``POST pods/NAME/binding`` assigns a node (409 when already assigned, as BindingREST does).
* ``mark_unschedulable`` is the scheduler's failure: PodScheduled False/Unschedulable and a
  ``FailedScheduling`` Warning Event from ``default-scheduler``.
"""

from __future__ import annotations

import copy
import hashlib
import time
from typing import Any

from tests.fakes.apiserver.config import Settings
from tests.fakes.apiserver.errors import ApiError, GroupResource, bad_request, conflict, not_found
from tests.fakes.apiserver.meta import first, micro_ts, ts
from tests.fakes.apiserver.resources import Resource
from tests.fakes.apiserver.store import Event, Store

PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
_KUBELET_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
_POD_BINDING = GroupResource("", "pods/binding")


def _container_id(pod_uid: str, name: str) -> str:
    return "containerd://" + hashlib.sha256(f"{pod_uid}/{name}".encode()).hexdigest()


class PodLifecycle:
    def __init__(self, store: Store, settings: Settings):
        self.store = store
        self.settings = settings
        self._logs: dict[tuple[str, str | None], str] = {}  # (pod uid, container or None) -> text
        store.reactions.append(self._react)

    def _react(self, ev: Event) -> None:
        if ev.res_id != "pods":
            return
        if ev.type == "DELETED":
            uid = ev.obj["metadata"].get("uid")
            for key in [k for k in self._logs if k[0] == uid]:
                self._logs.pop(key, None)
            return
        hook = self.settings.kubelet
        node = (ev.obj.get("spec") or {}).get("nodeName")
        was = ((ev.old or {}).get("spec") or {}).get("nodeName")
        if hook is not None and node and (ev.type == "ADDED" or not was):
            hook(copy.deepcopy(ev.obj))

    # ---- status ------------------------------------------------------------------------------------

    def set_phase(self, namespace: str, name: str, phase: str, *, exit_code: int | None = None,
                  reason: str | None = None, message: str | None = None) -> dict:
        if phase not in PHASES:
            raise ValueError(f"not a pod phase: {phase!r} (one of {', '.join(PHASES)})")

        def edit(pod: dict) -> None:
            if not (pod.get("spec") or {}).get("nodeName"):
                raise ValueError(f"pod {namespace}/{name} has no spec.nodeName: only a node's kubelet reports "
                                 "a phase (bind it first)")
            pod["status"] = kubelet_status(pod, phase, exit_code, reason, message)

        return self.store.mutate("Pod", name, namespace, edit)

    def mark_unschedulable(self, namespace: str, name: str, message: str) -> dict:
        def edit(pod: dict) -> None:
            st = pod.setdefault("status", {})
            st["phase"] = "Pending"
            _set_condition(st, "PodScheduled", "False", "Unschedulable", message)

        pod = self.store.mutate("Pod", name, namespace, edit)
        md = pod["metadata"]
        self.store.add({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": namespace,
                               "uid": md.get("uid"), "resourceVersion": md.get("resourceVersion")},
            "reason": "FailedScheduling", "message": message, "type": "Warning", "action": "Scheduling",
            "source": {}, "reportingComponent": "default-scheduler", "reportingInstance": "default-scheduler-fake",
            "eventTime": micro_ts(), "firstTimestamp": None, "lastTimestamp": None})
        return pod

    # ---- logs --------------------------------------------------------------------------------------

    def set_log(self, namespace: str, name: str, text: str, container: str | None = None) -> None:
        pod = self.store.get("Pod", name, namespace)
        if pod is None:
            raise KeyError(f"Pod {namespace}/{name} not found")
        self._logs[(pod["metadata"]["uid"], container)] = text

    def read_log(self, res: Resource, ns: str | None, name: str, query: dict[str, list[str]]) -> tuple[int, str]:
        pod = self.store.get(res.id, name, ns)
        if pod is None:
            raise not_found(res, name)
        container = _validate_container(pod, first(query, "container"))
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            return 200, ""  # no node, no kubelet to ask: an empty stream
        kubelet = self._kubelet_of(node)
        if kubelet is not None:
            return 200, _ask_kubelet(kubelet, ns or "", name, container, query)
        _check_log_status(pod, container)
        uid = pod["metadata"]["uid"]
        text = self._logs.get((uid, container), self._logs.get((uid, None), ""))
        tail = first(query, "tailLines")
        if tail is not None and int(tail) >= 0:
            lines = text.splitlines(keepends=True)
            text = "".join(lines[len(lines) - int(tail):]) if int(tail) else ""
        return 200, text

    def _kubelet_of(self, node_name: str) -> str | None:
        """``https://ADDR:PORT`` of the node's kubelet when a simulated one can listen there (its preferred address,
        in kube-apiserver's default order, is loopback); None when the fake plays that kubelet itself."""
        node = self.store.get("Node", node_name)
        if node is None:
            return None
        st = node.get("status") or {}
        addresses = st.get("addresses") or []
        addr = next((a.get("address") for t in _PREFERRED_ADDRESS_TYPES for a in addresses if a.get("type") == t),
                    None)
        if addr is None or not (addr.startswith("127.") or addr in ("::1", "localhost")):
            return None
        port = ((st.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port") or 10250
        return f"https://{addr}:{port}"

    # ---- binding -----------------------------------------------------------------------------------

    def bind(self, res: Resource, ns: str | None, name: str, body: Any, dry_run: bool) -> tuple[int, dict]:
        if not isinstance(body, dict) or body.get("kind") not in (None, "Binding"):
            raise bad_request("the body of the request is not a Binding")
        target = (body.get("target") or {}).get("name")
        if not target:
            raise bad_request("a binding needs target.name")
        pod = self.store.get(res.id, name, ns)
        if pod is None:
            raise not_found(res, name)
        if pod["metadata"].get("deletionTimestamp"):
            raise conflict(_POD_BINDING, name, f"pod {name} is being deleted, cannot be assigned to a host")
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            raise conflict(_POD_BINDING, name, f'pod {name} is already assigned to node "{node}"')
        if not dry_run:
            def edit(p: dict) -> None:
                p.setdefault("spec", {})["nodeName"] = target
                _set_condition(p.setdefault("status", {}), "PodScheduled", "True")

            self.store.mutate("Pod", name, ns, edit)
        return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


# kube-apiserver's --kubelet-preferred-address-types default.
_PREFERRED_ADDRESS_TYPES = ("Hostname", "InternalDNS", "InternalIP", "ExternalDNS", "ExternalIP")
_LOG_OPTIONS = ("tailLines", "timestamps", "follow", "previous", "sinceSeconds", "sinceTime", "limitBytes")


_KUBELET_TLS: Any = None


def _kubelet_tls() -> Any:
    """One client context for every kubelet: no verification (kube-apiserver's default), no CA bundle to load."""
    import ssl

    global _KUBELET_TLS
    if _KUBELET_TLS is None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        _KUBELET_TLS = ctx
    return _KUBELET_TLS


def _ask_kubelet(kubelet: str, ns: str, name: str, container: str, query: dict[str, list[str]]) -> str:
    """``GET KUBELET/containerLogs/NS/POD/CONTAINER`` as kube-apiserver relays it (the kubelet's certificate not
    verified): its text, or the Status kube-apiserver makes of its refusal (GenericHttpResponseChecker)."""
    import urllib.error
    import urllib.request
    from urllib.parse import quote, urlencode

    params = {k: query[k][0] for k in _LOG_OPTIONS if query.get(k)}
    url = f"{kubelet}/containerLogs/{quote(ns)}/{quote(name)}/{quote(container)}"
    if params:
        url += "?" + urlencode(params)
    ctx = _kubelet_tls()
    try:
        with urllib.request.urlopen(url, timeout=30, context=ctx) as resp:  # noqa: S310 - a loopback kubelet
            return resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        text = e.read().decode("utf-8", "replace")
        if e.code == 404:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ( pods/log {name})",
                           {"name": name, "kind": "pods/log"}) from None
        raise ApiError(e.code, None, text) from None
    except OSError as e:
        refused = isinstance(getattr(e, "reason", e), ConnectionRefusedError)
        why = f'dial tcp {kubelet.removeprefix("https://")}: connect: connection refused' if refused else str(e)
        raise ApiError(500, "", f'Get "{url}": {why}') from None


def _validate_container(pod: dict, container: str | None) -> str:
    spec = pod.get("spec") or {}
    names = [c["name"] for key in ("initContainers", "containers", "ephemeralContainers")
             for c in spec.get(key) or []]
    name = pod["metadata"]["name"]
    if not container:
        containers = spec.get("containers") or []
        if len(containers) == 1:
            return containers[0]["name"]
        if not containers:
            raise bad_request(f"a container name must be specified for pod {name}")
        raise bad_request(f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]")
    if container not in names:
        raise bad_request(f"container {container} is not valid for pod {name}")
    return container


def _check_log_status(pod: dict, container: str) -> None:
    """The kubelet's refusals for a container that has no log to show yet."""
    st = pod.get("status") or {}
    statuses = [s for key in ("containerStatuses", "initContainerStatuses") for s in st.get(key) or []]
    cs = next((s for s in statuses if s.get("name") == container), None)
    pod_name = pod["metadata"]["name"]
    if cs is None:
        if st.get("phase", "Pending") == "Pending":
            raise bad_request(f'container "{container}" in pod "{pod_name}" is waiting to start: ContainerCreating')
        return
    state, last = cs.get("state") or {}, (cs.get("lastState") or {}).get("terminated")
    if "running" in state or "terminated" in state or last or "waiting" not in state:
        return
    why = {"ErrImagePull": "image can't be pulled", "ImagePullBackOff": "trying and failing to pull image"}
    reason = state["waiting"].get("reason", "")
    raise bad_request(f'container "{container}" in pod "{pod_name}" is waiting to start: {why.get(reason, reason)}')


def _set_condition(st: dict, ctype: str, status: str, reason: str | None = None, message: str | None = None) -> None:
    conds = st.setdefault("conditions", [])
    cur = next((c for c in conds if c.get("type") == ctype), None)
    new: dict[str, Any] = {"type": ctype, "status": status, "lastProbeTime": None,
                           "lastTransitionTime": cur["lastTransitionTime"] if cur and cur.get("status") == status
                           and cur.get("lastTransitionTime") else ts()}
    if reason:
        new["reason"] = reason
    if message:
        new["message"] = message
    if cur is None:
        conds.append(new)
    else:
        conds[conds.index(cur)] = new


def kubelet_status(pod: dict, phase: str, exit_code: int | None, reason: str | None, message: str | None) -> dict:
    """The pod status a kubelet reports for ``phase`` (pkg/kubelet/kubelet_pods.go generateAPIPodStatus)."""
    old = copy.deepcopy(pod.get("status") or {})
    spec, md = pod.get("spec") or {}, pod["metadata"]
    if phase == "Unknown":
        return {**old, "phase": "Unknown"}
    node, now = spec["nodeName"], ts()
    names = [c["name"] for c in spec.get("containers") or []]
    statuses = []
    for c in spec.get("containers") or []:
        cid = _container_id(md.get("uid", ""), c["name"])
        cs: dict[str, Any] = {"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": False,
                              "restartCount": 0, "started": False, "lastState": {}}
        detail = {k: v for k, v in (("reason", reason), ("message", message)) if v}
        if phase == "Pending":
            waiting_reason = reason or "ContainerCreating"
            if waiting_reason == "ErrImagePull" and not message:
                detail["message"] = (f'failed to pull and unpack image "{c.get("image", "")}": failed to resolve '
                                     f'reference "{c.get("image", "")}": not found')
            cs["state"] = {"waiting": {**detail, "reason": waiting_reason}}
        elif phase == "Running":
            cs.update(ready=True, started=True, containerID=cid, imageID=f"{c.get('image', '')}@sha256:" + "0" * 64)
            cs["state"] = {"running": {"startedAt": now}}
        else:
            ok = phase == "Succeeded"
            code = exit_code if exit_code is not None else (0 if ok else 1)
            cs.update(containerID=cid, imageID=f"{c.get('image', '')}@sha256:" + "0" * 64)
            cs["state"] = {"terminated": {"exitCode": code, "reason": reason or ("Completed" if ok else "Error"),
                                          **({"message": message} if message else {}), "startedAt": now,
                                          "finishedAt": now, "containerID": cid}}
        if exit_code is not None and phase in ("Pending", "Running"):  # it ran, crashed and was restarted
            cs["restartCount"] = 1
            cs["lastState"] = {"terminated": {"exitCode": exit_code, "reason": "Error", "startedAt": now,
                                              "finishedAt": now, "containerID": cid}}
        statuses.append(cs)
    st: dict[str, Any] = {**{k: v for k, v in old.items() if k not in ("reason", "message")}, "phase": phase,
                          "containerStatuses": statuses}
    host_ip = f"192.0.2.{(sum(map(ord, node)) % 250) + 1}"
    pod_ip = old.get("podIP") or f"10.244.{sum(map(ord, node)) % 250}.{(sum(map(ord, md['name'])) % 250) + 2}"
    st.update(hostIP=host_ip, hostIPs=[{"ip": host_ip}], podIP=pod_ip, podIPs=[{"ip": pod_ip}],
              startTime=old.get("startTime") or now)
    st.setdefault("qosClass", "BestEffort")
    st["conditions"] = [c for c in old.get("conditions") or [] if c.get("type") not in _KUBELET_CONDITIONS]
    unready = f"containers with unready status: [{' '.join(names)}]"
    done = {"Succeeded": "PodCompleted", "Failed": "PodFailed"}.get(phase)
    sandbox = phase == "Running" or (phase == "Pending" and (reason or "ContainerCreating") != "ContainerCreating")
    _set_condition(st, "PodReadyToStartContainers", "True" if sandbox else "False")
    _set_condition(st, "Initialized", "True", "PodCompleted" if phase == "Succeeded" else None)
    for ctype in ("Ready", "ContainersReady"):
        if phase == "Running":
            _set_condition(st, ctype, "True")
        else:
            _set_condition(st, ctype, "False", done or "ContainersNotReady", None if done else unready)
    _set_condition(st, "PodScheduled", "True")
    return st
