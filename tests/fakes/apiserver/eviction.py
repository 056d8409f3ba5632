"""``POST pods/NAME/eviction`` and the PodDisruptionBudgets it honours
(pkg/registry/core/pod/storage/eviction.go, with the disruption controller's expected count).

Order: the ``eviction_hook`` (a test's veto), then KubeVirt's validating webhook when
``kubevirt_eviction_webhook`` is on (the default: virt-operator always installs it; admission runs
before the budgets), then the budgets (only for a pod that is Running and not terminating: a Pending
one is evicted whatever its budget says), then a delete with the eviction's DeleteOptions (graceful
on a node).

A budget is judged on the status the disruption controller would write, computed at the eviction
(``budget_status_locked``: an instant controller, so the real server's short "still being processed"
window after a budget is created or changed never opens here). As on kube-apiserver v1.36.2
(measured: tests/envtest/test_evictions.py): a budget whose pods' controller cannot be found (a missing
owner, another uid, a DaemonSet: no scale) never gets a status, and every eviction it covers is 429
"The disruption budget NAME is still being processed by the server." with ``retryAfterSeconds`` 10 and
``Retry-After: 10``; otherwise 429 "needs D healthy pods and has C currently" while currentHealthy <=
desiredHealthy, else (no pod expected) "does not allow evicting pods currently".

KubeVirt's webhook ``virt-launcher-eviction-interceptor.kubevirt.io`` is modelled on
kubevirt/kubevirt@v1.8.4 pkg/virt-api/webhooks/validating-webhook/admitters/pod-eviction-admitter.go
(admitLauncherPod; hotplug-disk pods are not modelled): for a virt-launcher pod that has not
finished, with its ``kubevirt.io/domain`` annotation, the VMI's eviction strategy (``spec.evictionStrategy``,
else the KubeVirt CR's ``spec.configuration.evictionStrategy``, else none: virt-config's default is None)
decides. None: allowed. LiveMigrate on a VMI whose ``LiveMigratable`` condition is not True: denied,
"VMI NAME is configured with an eviction strategy but is not live-migratable". LiveMigrate on a
migratable VMI, LiveMigrateIfPossible on a migratable one, and External: the VMI is marked
(``status.evacuationNodeName`` = the pod's node, not on a dry run) and the eviction denied with
'Eviction triggered evacuation of VMI "NS/NAME"' ("Evacuation in progress: " before it when it was
marked already; "Eviction request for target Pod" when the VMI runs on another node). Every denial
is code 429, as ``denied()`` answers; kube-apiserver turns it into a Status with that code, no
reason, and the message prefixed 'admission webhook "virt-launcher-eviction-interceptor.kubevirt.io"
denied the request: ' (kubernetes/apiserver@v0.35.0 pkg/admission/plugin/webhook/errors/statuserror.go
ToStatusErr). Moving the VMI (the evacuation controller's migration) is left to the test.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

from tests.fakes.apiserver.config import Settings
from tests.fakes.apiserver.errors import REASONS, ApiError, bad_request, not_found
from tests.fakes.apiserver.resources import Resource
from tests.fakes.apiserver.selectors import label_selector_matches
from tests.fakes.apiserver.store import Store

PDB_ID = "poddisruptionbudgets.policy"
KUBEVIRT_WEBHOOK = "virt-launcher-eviction-interceptor.kubevirt.io"


class Evictions:
    def __init__(self, store: Store, settings: Settings):
        self.store = store
        self.settings = settings

    def evict(self, res: Resource, ns: str | None, name: str, body: Any, dry_run: bool) -> tuple[int, dict]:
        if not isinstance(body, dict) or body.get("kind") not in (None, "Eviction"):
            raise bad_request("the body of the request is not an Eviction")
        if body.get("apiVersion") not in (None, "policy/v1", "policy/v1beta1"):
            raise bad_request(f"the API version in the data ({body.get('apiVersion')}) does not match the expected "
                              "API version (policy/v1)")
        bmd = body.get("metadata") or {}
        if bmd.get("name") not in (None, "", name):
            raise bad_request("name in URL does not match name in Eviction object")
        if bmd.get("namespace") not in (None, "", ns):
            raise bad_request("namespace in URL does not match namespace in Eviction object")
        options = dict(body.get("deleteOptions") or {})
        if "All" in (options.get("dryRun") or []):
            dry_run = True
        pod = self.store.get("pods", name, ns)
        if pod is None:
            raise not_found(res, name)
        hook = self.settings.eviction_hook
        if hook is not None:
            verdict = hook(pod, copy.deepcopy(body))
            if verdict is not None:
                code, msg = verdict
                raise ApiError(code, REASONS.get(code, "Unknown"), msg)
        if self.settings.kubevirt_eviction_webhook:
            denial = self._kubevirt_admit(pod, dry_run)
            if denial is not None:
                raise ApiError(429, "", f"admission webhook \"{KUBEVIRT_WEBHOOK}\" denied the request: {denial}")
        store = self.store
        with store.lock:
            key = store.key(res, ns, name)
            pod = store.bucket(res).get(key)
            if pod is None:
                raise not_found(res, name)
            phase = (pod.get("status") or {}).get("phase")
            if not (pod["metadata"].get("deletionTimestamp") or phase in ("Succeeded", "Failed", "Pending")):
                self._check_pdbs_locked(pod)
            _, events = store.delete_locked(res, key, options, dry_run)
        store.notify(events)
        return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def _kubevirt_admit(self, pod: dict, dry_run: bool) -> str | None:
        """admitLauncherPod: None to let the eviction go on, else the webhook's denial message."""
        md = pod["metadata"]
        if (md.get("labels") or {}).get("kubevirt.io") != "virt-launcher" or \
                (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return None
        name = (md.get("annotations") or {}).get("kubevirt.io/domain")
        if not name:
            return None
        ns = md["namespace"]
        vmi = self.store.get("VirtualMachineInstance", name, ns)
        if vmi is None:
            return f'kubevirt failed getting the vmi: virtualmachineinstances.kubevirt.io "{name}" not found'
        strategy = (vmi.get("spec") or {}).get("evictionStrategy")
        if strategy is None:
            kvs = self.store.list("KubeVirt") if self.store.table.get("kubevirts.kubevirt.io") else []
            strategy = next((((k.get("spec") or {}).get("configuration") or {}).get("evictionStrategy")
                             for k in kvs), None)
        status = vmi.get("status") or {}
        migratable = any(c.get("type") == "LiveMigratable" and c.get("status") == "True"
                         for c in status.get("conditions") or [])
        if strategy == "LiveMigrate" and not migratable:
            return f"VMI {name} is configured with an eviction strategy but is not live-migratable"
        if not (strategy == "LiveMigrate" or (strategy == "LiveMigrateIfPossible" and migratable)
                or strategy == "External"):
            return None
        triggered = f'Eviction triggered evacuation of VMI "{ns}/{name}"'
        if status.get("evacuationNodeName"):
            return "Evacuation in progress: " + triggered
        node = (pod.get("spec") or {}).get("nodeName")
        if status.get("nodeName") != node:
            return "Eviction request for target Pod"
        if not dry_run:
            self.store.mutate("VirtualMachineInstance", name, ns,
                              lambda v: v.setdefault("status", {}).__setitem__("evacuationNodeName", node))
        return triggered

    def _check_pdbs_locked(self, pod: dict) -> None:
        """EvictionREST's budget check (pkg/registry/core/pod/storage/eviction.go) against the budget's status as
        the disruption controller would compute it right now (``budget_status``)."""
        pdb_res = self.store.table.get(PDB_ID)
        pod_res = self.store.table.get("pods")
        if pdb_res is None or pod_res is None:
            return
        ns = pod["metadata"]["namespace"]
        labels = pod["metadata"].get("labels") or {}
        pdbs = [p for (pns, _), p in sorted(self.store.bucket(pdb_res).items())
                if pns == ns and _selects((p.get("spec") or {}).get("selector"), labels)]
        if not pdbs:
            return
        if len(pdbs) > 1:
            raise ApiError(500, "InternalError", "This pod has more than one PodDisruptionBudget, which the "
                           "eviction subresource does not support.")
        pdb = pdbs[0]
        name = pdb["metadata"]["name"]
        st = self.budget_status_locked(pdb)
        if st.sync_error is not None:
            # The controller could not compute the status, so observedGeneration stays behind the budget's
            # generation: createTooManyRequestsError, with its suggested retry.
            raise ApiError(429, "TooManyRequests", _REFUSED, {"causes": [{
                "reason": "DisruptionBudget",
                "message": f"The disruption budget {name} is still being processed by the server."}],
                "retryAfterSeconds": 10}, headers={"Retry-After": "10"})
        if not _pod_healthy(pod) and st.current >= st.desired and st.desired > 0:
            return  # an unready pod may go while the budget holds (IfHealthyBudget)
        if st.allowed > 0:
            return
        if st.current <= st.desired:
            why = f"The disruption budget {name} needs {st.desired} healthy pods and has {st.current} currently"
        else:  # e.g. a budget that covers no pod it can count (expectedPods 0)
            why = f"The disruption budget {name} does not allow evicting pods currently"
        raise ApiError(429, "TooManyRequests", _REFUSED, {"causes": [{"reason": "DisruptionBudget", "message": why}]})

    def budget_status_locked(self, pdb: dict) -> "BudgetStatus":
        """What the disruption controller (pkg/controller/disruption/disruption.go) writes in the budget's status,
        computed at once: currentHealthy counts Ready pods not being deleted; with an integer minAvailable the
        expected count is the number of pods, otherwise the sum of the scales of their controllers, found through
        each pod's controller ownerReference (name and uid; a ReplicaSet a Deployment controls stands for the
        Deployment; a DaemonSet has no scale); pods without a controller are left out of it. A controller that
        cannot be found is a failed sync. disruptionsAllowed is currentHealthy - desiredHealthy, and 0 when no
        pod is expected."""
        ns = pdb["metadata"]["namespace"]
        spec = pdb.get("spec") or {}
        pod_res = self.store.table.get("pods")
        pods = [p for (pns, _), p in self.store.bucket(pod_res).items()
                if pns == ns and _selects(spec.get("selector"), p["metadata"].get("labels"))] if pod_res else []
        current = sum(1 for p in pods if _pod_healthy(p))
        min_av, max_un = spec.get("minAvailable"), spec.get("maxUnavailable")
        try:
            if max_un is not None:
                expected = self._expected_scale_locked(ns, pods)
                desired = max(0, expected - _scaled(max_un, expected, round_up=True))
            elif isinstance(min_av, int):
                expected, desired = len(pods), min_av
            elif min_av is not None:
                expected = self._expected_scale_locked(ns, pods)
                desired = _scaled(min_av, expected, round_up=True)
            else:  # neither field: nothing may go (minAvailable 100% in effect)
                expected = self._expected_scale_locked(ns, pods)
                desired = expected
        except _SyncFailed as e:
            return BudgetStatus(0, 0, 0, 0, str(e))
        allowed = current - desired
        return BudgetStatus(expected, desired, current, allowed if expected > 0 and allowed > 0 else 0, None)

    def _expected_scale_locked(self, ns: str, pods: list[dict]) -> int:
        """getExpectedScale: the sum of the scales of the pods' controllers (each counted once)."""
        scales: dict[str, int] = {}
        for p in pods:
            ref = next((r for r in p["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
            if ref is None:
                continue  # an unmanaged pod: not expected
            found = self._controller_scale_locked(ns, ref)
            if found is None:
                raise _SyncFailed(f'found no controllers for pod "{p["metadata"]["name"]}"')
            scales[found[0]] = found[1]
        return sum(scales.values())

    def _controller_scale_locked(self, ns: str, ref: dict) -> tuple[str, int] | None:
        """The disruption controller's finders: (uid, scale) of the controller `ref` names, or None."""
        owner = self._owner_locked(ns, ref)
        if owner is None:
            return None
        if ref.get("kind") == "DaemonSet":
            raise _SyncFailed("daemonsets.apps does not implement the scale subresource")
        if ref.get("kind") == "ReplicaSet":
            parent = next((r for r in owner["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
            if parent is not None and parent.get("kind") == "Deployment":
                return self._controller_scale_locked(ns, parent)
        replicas = (owner.get("spec") or {}).get("replicas", 1)
        if not isinstance(replicas, int):
            return None
        return owner["metadata"].get("uid") or ref["name"], replicas

    def _owner_locked(self, ns: str, ref: dict) -> dict | None:
        for res in self.store.table.all():
            if res.kind == ref.get("kind") and res.namespaced:
                owner = self.store.bucket(res).get((ns, ref.get("name")))
                if owner is not None and ref.get("uid") and owner["metadata"].get("uid") != ref["uid"]:
                    return None  # another object of that name
                return owner
        return None


_REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."


class _SyncFailed(Exception):
    pass


@dataclass(frozen=True)
class BudgetStatus:
    expected: int
    desired: int
    current: int
    allowed: int
    sync_error: str | None


def _selects(selector: Any, labels: dict | None) -> bool:
    return label_selector_matches(selector, labels)


def _pod_healthy(p: dict) -> bool:
    if p["metadata"].get("deletionTimestamp"):
        return False
    st = p.get("status") or {}
    if st.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])


def _scaled(value: Any, total: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        x = total * int(value[:-1]) / 100
        return int(math.ceil(x)) if round_up else int(math.floor(x))
    return int(value)
