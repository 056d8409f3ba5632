"""``POST pods/NAME/eviction`` and the PodDisruptionBudgets it honours
(pkg/registry/core/pod/storage/eviction.go, with the disruption controller's expected count).

Order: the ``eviction_hook`` (a test's veto), then KubeVirt's validating webhook when
``kubevirt_eviction_webhook`` is on (the default: virt-operator always installs it; admission runs
before the budgets), then the budgets (only for a pod that is Running and not terminating), then a
delete with the eviction's DeleteOptions (graceful on a node).

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
        pdb_res = self.store.table.get(PDB_ID)
        pod_res = self.store.table.get("pods")
        if pdb_res is None or pod_res is None:
            return
        ns = pod["metadata"]["namespace"]
        labels = pod["metadata"].get("labels") or {}
        pdbs = [p for (pns, _), p in sorted(self.store.bucket(pdb_res).items())
                if pns == ns and label_selector_matches((p.get("spec") or {}).get("selector"), labels)]
        if not pdbs:
            return
        if len(pdbs) > 1:
            raise ApiError(500, "InternalError", "This pod has more than one PodDisruptionBudget, which the "
                           "eviction subresource does not support.")
        pdb = pdbs[0]
        spec = pdb.get("spec") or {}
        pods = [p for (pns, _), p in self.store.bucket(pod_res).items()
                if pns == ns and label_selector_matches(spec.get("selector"), p["metadata"].get("labels"))
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        expected = self._expected_pods_locked(ns, pods)
        healthy = sum(1 for p in pods if _pod_healthy(p))
        if spec.get("minAvailable") is not None:
            desired = _scaled(spec["minAvailable"], expected, round_up=True)
        elif spec.get("maxUnavailable") is not None:
            desired = max(0, expected - _scaled(spec["maxUnavailable"], expected, round_up=True))
        else:
            desired = expected  # a PDB with neither field: minAvailable 100% in effect
        if not _pod_healthy(pod) and healthy >= desired:
            return  # unhealthy pods may go while the budget holds (IfHealthyBudget)
        if healthy - 1 >= desired:
            return
        raise ApiError(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.",
                       {"causes": [{"reason": "DisruptionBudget",
                                    "message": f"The disruption budget {pdb['metadata']['name']} needs {desired} "
                                               f"healthy pods and has {healthy} currently"}]})

    def _expected_pods_locked(self, ns: str, pods: list[dict]) -> int:
        """What the disruption controller calls expectedCount: the scale (spec.replicas) of each
        controller owning matching pods; a pod whose controller is not in the store counts as 1."""
        scales: dict[str, int] = {}
        loose = 0
        for p in pods:
            ref = next((r for r in p["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
            owner = None
            if ref is not None:
                for res in self.store.table.all():
                    if res.kind == ref.get("kind") and res.namespaced:
                        owner = self.store.bucket(res).get((ns, ref.get("name")))
                        break
            replicas = ((owner or {}).get("spec") or {}).get("replicas")
            if owner is not None and isinstance(replicas, int):
                scales[owner["metadata"].get("uid") or ref["name"]] = replicas
            else:
                loose += 1
        return sum(scales.values()) + loose


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
