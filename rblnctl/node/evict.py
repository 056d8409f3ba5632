"""Evict pods with a bounded number of requests in flight, and wait until they have left the node.

Evictions go through the policy/v1 Eviction API, so PodDisruptionBudgets hold: a 429 is retried
with exponential backoff (1 s doubling to 10 s, the last wait cut so the final try happens at the
deadline) and reported live; a 404 means the pod is already gone. Every eviction (and delete) carries
`preconditions.uid` of the pod the survey decided on: a pod deleted and re-created under its name since is refused
by the server (409) and reported, never evicted in its place. KubeVirt's eviction webhook
answers 429 too (see `kubevirt_denial`): when it started a live migration instead, the wait is for the
VMI to leave the node; when it refuses for good (the VM cannot migrate), the drain fails at once
(Refused) naming the VM. The wait for the pods to leave is
one watch of the node's pods (fieldSelector spec.nodeName: one LIST, then one stream, reopened when
the server ends it), whatever the number of pods, and ends the moment the last one is gone; where
watching is not allowed it lists the node's pods once per round instead. A pod has left when it is
absent or a pod of the same name has another UID (kubectl's rule).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from rblnctl import constants as C
from rblnctl.clock import SYSTEM_CLOCK, Clock, Stop, Stopped, result_of
from rblnctl.errors import ClusterError, NotFound, RblnError, Refused, WaitTimeout
from rblnctl.kube import PODS, SYNC, VMIS, Kube, WatchSpec, object_key, watch_many, writes
from rblnctl.node.events import NodeEvents
from rblnctl.node.options import DrainOptions
from rblnctl.node.pods import PodRef

log = logging.getLogger(__name__)

BACKOFF_START_S = 1.0
BACKOFF_CAP_S = 10.0


# What kube-apiserver puts before an admission webhook's denial message (kubernetes/apiserver@v0.35.0
# pkg/admission/plugin/webhook/errors/statuserror.go ToStatusErr); the webhook's own code (429) is kept.
_KUBEVIRT_DENIED = f'admission webhook "{C.KUBEVIRT_EVICTION_WEBHOOK}" denied the request: '
# kubevirt/kubevirt@v1.8.4 pkg/virt-api/webhooks/validating-webhook/admitters/pod-eviction-admitter.go
# (the same texts at v1.5.2, v1.6.3 and main): the VMI was marked for evacuation (a live migration, or with
# evictionStrategy External whatever tears it down), now or by an earlier request ("Evacuation in progress: ").
_EVACUATION = re.compile(r'(?:Evacuation in progress: )?Eviction triggered evacuation of VMI "([^"/]+)/([^"]+)"')
# Denials that pass: the VMI could not be read or marked ("it is up to the user to issue a retry"), or the pod is
# the target of a migration under way. Every other denial of KubeVirt's webhook stands for this drain (a VMI
# "configured with an eviction strategy but is not live-migratable", a hotplug pod of a running VMI).
_TRANSIENT = ("kubevirt failed getting the vmi", "kubevirt failed marking the vmi", "Eviction request for target Pod",
              "failed to parse the eviction object")


def kubevirt_denial(e: ClusterError) -> str | None:
    """The message of KubeVirt's pod eviction webhook when it denied this eviction (a 429), else None.

    kube-apiserver answers such a denial with the webhook's code 429, no Status reason, and the message
    'admission webhook "virt-launcher-eviction-interceptor.kubevirt.io" denied the request: MESSAGE'; a
    PodDisruptionBudget's 429 has reason TooManyRequests and its own message.
    """
    text = e.server_message or str(e)
    i = text.find(_KUBEVIRT_DENIED)
    return text[i + len(_KUBEVIRT_DENIED):] if e.status == 429 and i >= 0 else None


@dataclass(frozen=True, kw_only=True)
class Evacuating:
    """KubeVirt turned the eviction of a virt-launcher pod into an evacuation of its VMI."""

    pod: PodRef
    namespace: str
    vmi: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.vmi}"


@dataclass(frozen=True, kw_only=True)
class Evicted:
    """What an eviction round did: the pods accepted, the VMIs KubeVirt evacuates instead, and the pods a
    budget still refused at the deadline."""

    evicted: list[PodRef] = field(default_factory=list)
    evacuating: list[Evacuating] = field(default_factory=list)
    budget_refused: dict[str, str] = field(default_factory=dict)  # ns/name -> the server's last message
    replaced: list[PodRef] = field(default_factory=list)  # gone and re-created (another uid) since the list: untouched


@dataclass(frozen=True)
class _Replaced:
    """The pod rblnctl decided on is gone; a pod of its name (another uid) is not evicted in its place."""

    pod: PodRef


@dataclass(kw_only=True)
class Evictor:
    """Evict (or with disable_eviction delete) pods; wait for them to go."""

    kube: Kube
    options: DrainOptions
    events: NodeEvents = field(default_factory=NodeEvents)
    clock: Clock = SYSTEM_CLOCK
    stop: Stop | None = None  # set when the run is interrupted: no eviction after it, waits end (Stopped)

    def evict(self, pods: list[PodRef], deadline: float, vmis: Mapping[str, str] | None = None) -> Evicted:
        """Send every eviction with at most options.max_parallel in flight.

        Stops sending (and stops waiting on budgets) at the first refusal that is not a budget's,
        and raises it; Ctrl-C, a signal or `stop` stops every worker at once (Stopped for `stop`).
        `vmis` names the VMI of each virt-launcher pod (by "ns/name"), for KubeVirt's refusals.
        """
        if not pods:
            return Evicted()
        with self.stop.linked() if self.stop is not None else nullcontext(Stop()) as stop:
            outcome = self._evict_all(pods, deadline, stop, vmis or {})
        if self.stop is not None and self.stop.is_set():
            raise Stopped(f"stopped while evicting {len(pods)} pod(s)")
        return outcome

    def _evict_all(self, pods: list[PodRef], deadline: float, stop: Stop, vmis: Mapping[str, str]) -> Evicted:
        refused: dict[str, str] = {}
        errors: list[RblnError] = []
        done: list[PodRef] = []
        evacuating: list[Evacuating] = []
        replaced: list[PodRef] = []
        lock = threading.Lock()

        def work(p: PodRef) -> None:
            try:
                outcome = self._evict_one(p, deadline, stop, vmis.get(str(p)))
            except RblnError as e:
                stop.set()
                with lock:
                    errors.append(e)
                return
            with lock:
                if isinstance(outcome, str):
                    refused[str(p)] = outcome
                elif isinstance(outcome, Evacuating):
                    evacuating.append(outcome)
                elif isinstance(outcome, _Replaced):
                    replaced.append(outcome.pod)
                elif outcome:
                    done.append(p)

        ex = ThreadPoolExecutor(max_workers=min(self.options.max_parallel, len(pods)),
                                thread_name_prefix="rblnctl-evict")
        try:
            for fut in [ex.submit(work, p) for p in pods]:  # ex.map's order; its wait in slices (Ctrl-C at once)
                result_of(fut)
        except BaseException:
            # Ctrl-C or a signal while workers back off on a budget: send no eviction after it, and do not
            # sit out the timeout waiting for them (the `with` form would join them first).
            stop.set()
            ex.shutdown(wait=False, cancel_futures=True)
            raise
        ex.shutdown(wait=True)
        if errors:
            raise errors[0]
        order = {str(p): i for i, p in enumerate(pods)}
        done.sort(key=lambda p: order[str(p)])
        evacuating.sort(key=lambda v: order[str(v.pod)])
        replaced.sort(key=lambda p: order[str(p)])
        return Evicted(evicted=done, evacuating=evacuating, budget_refused=refused, replaced=replaced)

    def _evict_one(self, p: PodRef, deadline: float, stop: threading.Event,
                   vmi: str | None) -> bool | str | Evacuating | _Replaced:
        """True when evicted (or already gone), the last budget message when a budget held until the
        deadline, Evacuating when KubeVirt moves the pod's VMI instead, _Replaced when the server refused the
        eviction's uid precondition (the pod was re-created: not evicted, reported), False when stopped because
        another eviction failed. Raises Refused when KubeVirt's webhook refuses for good."""
        delay = BACKOFF_START_S
        attempt = 0
        while not stop.is_set():
            try:
                self._send(p)
            except NotFound:
                log.debug("pod %s already gone", p)
                self.events.on_evicted(p)
                return True
            except ClusterError as e:
                if e.status == 409 and p.uid:  # the uid precondition: the pod is gone, or another has its name
                    now = self.kube.get_optional(PODS, p.name, namespace=p.namespace)
                    if now is None:
                        self.events.on_evicted(p)
                        return True
                    if _uid(now) != p.uid:
                        self.events.on_warning(f"pod {p} was deleted and re-created (another uid) since rblnctl "
                                               "listed it: the new pod is not evicted")
                        return _Replaced(p)
                if e.status != 429:
                    raise
                denial = kubevirt_denial(e)
                if denial is not None:
                    m = _EVACUATION.fullmatch(denial)
                    if m:
                        self.events.on_warning(f"KubeVirt is evacuating VMI {m[1]}/{m[2]} (live migration) instead "
                                               f"of evicting {p}: waiting for it to leave the node")
                        return Evacuating(pod=p, namespace=m[1], vmi=m[2])
                    if not denial.startswith(_TRANSIENT):
                        raise _kubevirt_refused(p, vmi, denial)
                attempt += 1
                # Keep the server's words ("... needs 1 healthy pods and has 1 currently"), not our request line.
                message = e.server_message or (str(e).split(f" {e.reason} ", 1)[-1] if e.reason else str(e))
                remaining = deadline - self.clock.monotonic()
                if remaining <= 0 or self.options.server_dry_run:
                    # A dry run never waits for what a real run would wait for: the refusal is reported once.
                    return message
                self.events.on_pdb_blocked(p, message, attempt)
                self.clock.sleep(min(delay, remaining), stop)
                delay = min(delay * 2, BACKOFF_CAP_S)
                continue
            self.events.on_evicted(p)
            return True
        return False

    def _send(self, p: PodRef) -> None:
        """Evict (or delete) one pod. A request whose outcome is unknown (a lost reply, a reset connection, a
        5xx) is settled by reading the pod back (rblnctl.kube.writes): gone, replaced or terminating means
        done; still there, evicted again (an eviction is safe to repeat). A 429 or 404 is raised as it is."""
        options: dict[str, Any] = {}
        if p.uid:  # the pod rblnctl decided on, not one re-created under its name since (a 409 then)
            options["preconditions"] = {"uid": p.uid}
        if self.options.grace_period_s is not None:
            options["gracePeriodSeconds"] = self.options.grace_period_s
        if self.options.server_dry_run:
            options["dryRun"] = ["All"]
        if self.options.disable_eviction:
            w = writes.delete(PODS, p.name, namespace=p.namespace, body=options or None)
        else:
            body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                                    "metadata": {"name": p.name, "namespace": p.namespace}}
            if options:
                body["deleteOptions"] = options
            w = writes.create(PODS, body, namespace=p.namespace, sub_of=p.name, sub="eviction")

        def next_write(pod: Any) -> writes.Write | None:
            if pod is writes.UNREAD:
                return w
            if pod is None or (p.uid and _uid(pod) != p.uid) or (pod.get("metadata") or {}).get("deletionTimestamp"):
                return None
            return w

        writes.settle(self.kube, next_write, read=lambda: self.kube.get_optional(PODS, p.name, namespace=p.namespace),
                      what=f"pod {p}", dry_run=self.options.server_dry_run, backoff_s=BACKOFF_START_S / 2,
                      clock=self.clock)

    def wait_gone(self, node: str, pods: list[PodRef], deadline: float) -> None:
        """Wait until every pod in `pods` has left `node`, watching the node's pods; WaitTimeout names the rest.

        The requests do not depend on the number of pods: one LIST and one watch stream (reopened
        when the server ends it, relisted when it has forgotten where to resume). Failures that may
        pass (throttling, a 5xx, the API server restarting) are reported and retried until the
        deadline. Raises Stopped when `stop` is set.
        """
        pending = {(p.namespace, p.name): p for p in pods}
        if not pending:
            return

        def left(key: tuple[str, str]) -> None:
            self.events.on_gone(pending.pop(key))

        # watch_many, not watch: the stream is read on a thread, the main thread waits for Ctrl-C in slices
        for ev in watch_many(self.kube, [WatchSpec(PODS, field_selector=f"spec.nodeName={node}")], clock=self.clock,
                             stop=self.stop, timeout_s=max(0.0, deadline - self.clock.monotonic()),
                             poll_s=self.options.poll_s, on_retry=lambda e: self.events.on_warning(
                                 f"watching the pods on {node} failed ({e}); trying again")):
            if ev.type == SYNC:
                here = {object_key(o): _uid(o) for o in ev.objects}
                for key, p in list(pending.items()):
                    if key not in here or (p.uid and here[key] != p.uid):
                        left(key)
            elif ev.object is not None:
                key = object_key(ev.object)
                waited = pending.get(key)
                if waited is None:
                    continue
                same = not waited.uid or _uid(ev.object) == waited.uid
                # Gone: deleted; or a pod of the same name with another UID (a replacement) appeared.
                if (ev.type == "DELETED" and same) or (ev.type != "DELETED" and not same):
                    left(key)
            if not pending:
                return
        if self.stop is not None and self.stop.is_set():
            raise Stopped(f"stopped while waiting for {len(pending)} pod(s) to leave node {node}")
        raise timeout_error(self.options.timeout_s, list(pending.values()), {})


    def wait_evacuated(self, node: str, moving: list[Evacuating], deadline: float) -> None:
        """Wait until every VMI in `moving` has left `node` (migrated, or gone), watching the VMIs labelled
        with the node: KubeVirt moves the kubevirt.io/nodeName label to the target when a migration
        completes (kubevirt/kubevirt@v1.8.4 pkg/virt-handler/migration-target.go). WaitTimeout names the rest.
        """
        pending = {(v.namespace, v.vmi): v for v in moving}
        if not pending:
            return

        def left(key: tuple[str, str]) -> None:
            v = pending.pop(key)
            self.events.on_warning(f"VMI {v} has left node {node}")
            self.events.on_gone(v.pod)

        for ev in watch_many(self.kube, [WatchSpec(VMIS, label_selector=f"{C.VMI_NODE_LABEL}={node}")],
                             clock=self.clock, stop=self.stop, timeout_s=max(0.0, deadline - self.clock.monotonic()),
                             poll_s=self.options.poll_s, on_retry=lambda e: self.events.on_warning(
                                 f"watching the VMIs on {node} failed ({e}); trying again")):
            if ev.type == SYNC:
                here = {object_key(o) for o in ev.objects if _vmi_node(o) in ("", node)}
                for key in [k for k in pending if k not in here]:
                    left(key)
            elif ev.object is not None and object_key(ev.object) in pending:
                if ev.type == "DELETED" or _vmi_node(ev.object) not in ("", node):
                    left(object_key(ev.object))
            if not pending:
                return
        if self.stop is not None and self.stop.is_set():
            raise Stopped(f"stopped while waiting for {len(pending)} VMI(s) to leave node {node}")
        raise timeout_error(self.options.timeout_s, [], {}, evacuating=list(pending.values()))


def _kubevirt_refused(p: PodRef, vmi: str | None, denial: str) -> Refused:
    """KubeVirt's webhook will not let this VM's launcher go: one line naming the VM (`vmi`) and the way out."""
    if vmi is None:
        return Refused(f"KubeVirt refuses evicting pod {p}: {denial}")
    return Refused(f"KubeVirt refuses evicting pod {p} of VM {p.namespace}/{vmi}: {denial}; stop the VM "
                   f"(virtctl stop {vmi} -n {p.namespace}), migrate it, or change its evictionStrategy")


def _vmi_node(obj: dict) -> str:
    return str((obj.get("status") or {}).get("nodeName") or "")


def _uid(obj: dict) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


# kube-apiserver's cause of a budget's 429 (k8s.io/kubernetes pkg/registry/core/pod/storage/eviction.go,
# checkAndDecrement: "The disruption budget %s needs %v healthy pods and has %v currently")
_BUDGET = re.compile(r"[Tt]he disruption budget (\S+) needs (\d+) healthy pods and has (\d+) currently")


def budget_lines(refused: Mapping[str, str]) -> list[str]:
    """Each budget that held, with its numbers and its pods, then what to do next (kubectl drain names the cause
    on every retry; a timeout that names no budget leaves the user to find it)."""
    budgets: dict[tuple[str, str], tuple[str, str, list[str]]] = {}
    for pod, message in sorted(refused.items()):
        m = _BUDGET.search(message or "")
        if m:
            ns = pod.split("/", 1)[0]
            budgets.setdefault((ns, m[1]), (m[2], m[3], []))[2].append(pod)
    lines = [f"PodDisruptionBudget {ns}/{name} needs {need} healthy pod(s) and has {have}: it allows no eviction of "
             f"{', '.join(pods)}" for (ns, name), (need, have, pods) in sorted(budgets.items())]
    first = next(iter(sorted(budgets)), None)
    look = f"`kubectl get pdb {first[1]} -n {first[0]}`" if first else "`kubectl get pdb -A`"
    lines.append(f"next: see the budget ({look}); give its workload another healthy pod (scale it up, or wait for "
                 "one that is starting), then run again; or a longer --timeout; --disable-eviction deletes the pods "
                 "instead and bypasses every budget")
    return lines


def dry_run_refused(timeout_s: float, refused: dict[str, str]) -> Refused:
    """A server dry run that met a budget's refusal: said once, at once (a real run would retry until its
    timeout, and the budget may allow it by then, or not)."""
    err = Refused(f"server dry run: disruption budgets refuse evicting {', '.join(sorted(refused))} now; a real run "
                  f"retries for up to {timeout_s:g}s, until a budget allows it")
    err.with_details(budget_lines(refused))
    return err


def timeout_error(timeout_s: float, pending: list[PodRef], refused: dict[str, str], *,
                  evacuating: list[Evacuating] | None = None) -> WaitTimeout:
    """The timeout of a drain: budgets still refusing, pods still terminating, VMIs KubeVirt is still
    evacuating (each on its own detail line)."""
    details = []
    if refused:
        details.append("disruption budgets still refuse evicting " + ", ".join(sorted(refused)))
        details += budget_lines(refused)
    if evacuating:
        details.append("KubeVirt is still evacuating VMI " + ", ".join(str(v) for v in evacuating)
                       + " (a live migration: see its VirtualMachineInstanceMigration)")
    if pending:
        details.append("still terminating: " + ", ".join(str(p) for p in pending))
    err = WaitTimeout(f"pods did not leave within {timeout_s:g}s")
    err.with_details(details)
    return err
