"""A test's view of a real KubeVirt stack: tests/cluster/backend.py's Backend (``api``, ``rblnctl(...)``, ``mark()`` /
``writes()`` from the audit log), plus a namespace of the test's own and what a KubeVirt test keeps asking.

``KvBackend.reset()`` (after each test) puts the cluster back as the stack started it: the test's namespace and
every VM, VMI, launcher pod and claim in it gone (waited for, so no launcher pod holds a node's NPUs into the next
test), the cluster-scoped objects it created deleted, the KubeVirt CR's configuration, the nodes' labels, taints,
cordon and allocatable as they were.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

from tests.cluster.backend import Backend, Write
from tests.cluster.client import Api, ApiFailure
from tests.envtest.audit import AuditLog
from tests.kubevirt_real.stack import Stack

CLUSTER_SCOPED = ("DeviceClass", "ResourceSlice", "Node", "ClusterRole", "ClusterRoleBinding")
_namespaces = itertools.count(1)


class KvBackend(Backend):
    name = "kubevirt"

    def __init__(self, stack: Stack, workdir: Path) -> None:
        super().__init__()
        self.stack = stack
        self.workdir = workdir
        self.kubeconfig = stack.kubeconfig
        self.api = Api(stack.url, token=stack.token, ca=str(stack.ca))
        self.audit = AuditLog(stack.audit_log)
        self._mark = 0
        self.namespace = ""
        self._baseline: dict[str, set[str]] = {}
        self._kubevirt_config: Any = None
        self._nodes: dict[str, dict] = {}

    # ---- what rblnctl did ------------------------------------------------------------------------

    def mark(self) -> None:
        self._mark = self.audit.mark()

    def writes(self) -> list[Write]:
        return [Write(e.verb, e.uri.split("?")[0], e.dry_run, e.code) for e in self.audit.writes(self._mark)]

    def requests(self, *, user_agent: str = "rblnctl/") -> list[Any]:
        """Every request rblnctl sent since the mark (reads too), as the audit log has them."""
        return self.audit.events(self._mark, user_agent=user_agent)

    # ---- isolation -------------------------------------------------------------------------------

    def begin(self) -> str:
        """Snapshot what the stack holds, make the test's namespace, mark the audit log; the namespace's name."""
        self._baseline = {k: self._names(k) for k in CLUSTER_SCOPED}
        kv = self.kubevirt_cr()
        self._kubevirt_config = (kv or {}).get("spec", {}).get("configuration")
        self._nodes = {n["metadata"]["name"]: n for n in self.api.list("Node")}
        self.namespace = f"kv-{next(_namespaces)}"
        self.api.create({"kind": "Namespace", "metadata": {"name": self.namespace}})
        self.mark()
        return self.namespace

    def _names(self, kind: str) -> set[str]:
        return {o["metadata"]["name"] for o in self.api.list(kind)}

    def reset(self) -> None:
        self.close()
        ns = self.namespace
        for kind in ("VirtualMachine", "VirtualMachineInstance"):
            for o in self.api.list(kind, ns):
                self._delete(kind, o["metadata"]["name"], ns)
        self.api.wait_for(lambda: not self.api.list("VirtualMachine", ns), timeout_s=60,
                          message=f"the VMs of {ns} gone")
        deadline = time.monotonic() + 30
        while self.api.list("VirtualMachineInstance", ns) and time.monotonic() < deadline:
            time.sleep(0.2)
        for vmi in self.api.list("VirtualMachineInstance", ns):  # finalizers of a VMI virt-handler never finishes
            self.api.patch("VirtualMachineInstance", vmi["metadata"]["name"], {"metadata": {"finalizers": None}}, ns)
        for p in self.api.list("Pod", ns):
            self._delete("Pod", p["metadata"]["name"], ns, grace_s=0)
        self.api.wait_for(lambda: not self.api.list("Pod", ns), timeout_s=60, message=f"the pods of {ns} gone")
        self._delete("Namespace", ns, None)
        for kind in CLUSTER_SCOPED:
            for name in self._names(kind) - self._baseline.get(kind, set()):
                self._delete(kind, name, None)
        if self._kubevirt_config is not None:
            self.api.mutate("KubeVirt", "kubevirt", "kubevirt",
                            lambda o: o["spec"].__setitem__("configuration", self._kubevirt_config))
        for name, before in self._nodes.items():
            self._restore_node(name, before)

    def _delete(self, kind: str, name: str, ns: str | None, **kw: Any) -> None:
        try:
            self.api.delete(kind, name, ns, **kw)
        except ApiFailure as e:
            if e.status != 404:
                raise

    def _restore_node(self, name: str, before: dict) -> None:
        now = self.api.get("Node", name)
        if now is None:
            return
        md, bmd = now["metadata"], before["metadata"]
        labels = {k: None for k in md.get("labels") or {} if k not in (bmd.get("labels") or {})}
        labels.update(bmd.get("labels") or {})
        annotations = {k: None for k in md.get("annotations") or {} if k not in (bmd.get("annotations") or {})}
        annotations.update(bmd.get("annotations") or {})
        if labels != (md.get("labels") or {}) or annotations != (md.get("annotations") or {}) or \
                now.get("spec") != before.get("spec"):
            self.api.patch("Node", name, {"metadata": {"labels": labels, "annotations": annotations},
                                          "spec": {"unschedulable": before["spec"].get("unschedulable"),
                                                   "taints": before["spec"].get("taints")}})
        status = {k: before.get("status", {}).get(k) for k in ("capacity", "allocatable")}
        if any(now.get("status", {}).get(k) != v for k, v in status.items()):
            self.api.patch("Node", name, {"status": {k: {**{r: None for r in now["status"].get(k) or {}}, **(v or {})}
                                                     for k, v in status.items()}}, sub="status")

    # ---- KubeVirt ------------------------------------------------------------------------------------

    def kubevirt_cr(self) -> dict | None:
        return self.api.get("KubeVirt", "kubevirt", "kubevirt")

    def set_gates(self, enabled: list[str], disabled: list[str] | None = None) -> None:
        """The KubeVirt CR's feature gates, as an administrator sets them (kubectl edit)."""
        def edit(o: dict) -> None:
            dev = o["spec"].setdefault("configuration", {}).setdefault("developerConfiguration", {})
            dev["featureGates"] = list(enabled)
            if disabled is not None:
                dev["disabledFeatureGates"] = list(disabled)
        self.api.mutate("KubeVirt", "kubevirt", "kubevirt", edit)

    def no_start_backoff(self) -> None:
        """Stand in for what the real virt-handler's phase history does: it records each VMI phase it sets
        (kubevirt/kubevirt@v1.9.0 pkg/virt-handler/vm.go -> controller.SetVMIPhaseTransitionTimestamp), so a VMI that
        ran never counts as a failed start. The stack's fake virt-handler records none, so virt-controller counts
        every stop of an Always or RerunOnFailure VM as a start failure (pkg/virt-controller/watch/vm/vm.go
        syncStartFailureStatus) and delays its next start 10-15 s, then 40-60 s (CrashLoopBackOff). Until the test
        ends, a VM of the test's namespace that gets `status.startFailure` has it removed, as the real one would
        never have had it."""
        import threading

        ns, api = self.namespace, self.api
        done = threading.Event()

        def loop() -> None:
            while not done.wait(0.05):
                try:
                    for o in api.list("VirtualMachine", ns):
                        failure = (o.get("status") or {}).get("startFailure")
                        if failure:
                            api.patch("VirtualMachine", o["metadata"]["name"], [
                                {"op": "test", "path": "/status/startFailure", "value": failure},
                                {"op": "remove", "path": "/status/startFailure"}], ns, type_="json", sub="status")
                except ApiFailure:
                    continue  # it changed meanwhile, or went: look again

        class _Stop:
            def stop(self) -> None:
                done.set()
                thread.join(5)

        thread = threading.Thread(target=loop, name="no-start-backoff", daemon=True)
        thread.start()
        self._kubelets.append(_Stop())

    def virtctl(self, action: str, name: str, body: dict | None = None) -> tuple[int, Any]:
        """What `virtctl start|stop|restart NAME` sends, as the admin: a PUT to virt-api's subresource with client-go's
        Accept (virt-api answers 406 to a bare application/json). (HTTP status, decoded body)."""
        import json

        import urllib3

        pool = urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=str(self.stack.ca))
        resp = pool.request("PUT", f"{self.stack.url}/apis/subresources.kubevirt.io/v1/namespaces/{self.namespace}/"
                            f"virtualmachines/{name}/{action}", body=json.dumps(body or {}).encode(),
                            headers={"Authorization": f"Bearer {self.stack.token}", "Content-Type": "application/json",
                                     "Accept": "application/json, */*", "User-Agent": "virtctl/tests"})
        text = resp.data
        try:
            return resp.status, json.loads(text) if text else None
        except ValueError:
            return resp.status, text.decode("utf-8", "replace")

    def vm(self, name: str) -> dict | None:
        return self.api.get("VirtualMachine", name, self.namespace)

    def vmi(self, name: str) -> dict | None:
        return self.api.get("VirtualMachineInstance", name, self.namespace)

    def launcher_pods(self, name: str) -> list[dict]:
        return self.api.list("Pod", self.namespace, labels=f"vm.kubevirt.io/name={name}")

    def wait_vmi_phase(self, name: str, phase: str, *, timeout_s: float = 60) -> dict:
        def reached() -> dict | None:
            vmi = self.vmi(name)
            return vmi if vmi and (vmi.get("status") or {}).get("phase") == phase else None
        return self.api.wait_for(reached, timeout_s=timeout_s, interval_s=0.2,
                                 message=f"VMI {self.namespace}/{name} {phase}")

    def wait_no_vmi(self, name: str, *, timeout_s: float = 60) -> None:
        self.api.wait_for(lambda: self.vmi(name) is None, timeout_s=timeout_s, interval_s=0.2,
                          message=f"VMI {self.namespace}/{name} gone")
