"""Evict pods with a bounded number of requests in flight, and wait until they have left the node.

Evictions go through the policy/v1 Eviction API, so PodDisruptionBudgets hold: a 429 is retried
with exponential backoff (1 s doubling to 10 s, the last wait cut so the final try happens at the
deadline) and reported live; a 404 means the pod is already gone. The wait for the pods to leave is
one watch of the node's pods (fieldSelector spec.nodeName: one LIST, then one stream, reopened when
the server ends it), whatever the number of pods, and ends the moment the last one is gone; where
watching is not allowed it lists the node's pods once per round instead. A pod has left when it is
absent or a pod of the same name has another UID (kubectl's rule).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from rblnctl.clock import SYSTEM_CLOCK, Clock, Stop, Stopped
from rblnctl.errors import ClusterError, NotFound, RblnError, WaitTimeout
from rblnctl.kube import PODS, SYNC, Kube, object_key
from rblnctl.node.events import NodeEvents
from rblnctl.node.options import DrainOptions
from rblnctl.node.pods import PodRef

log = logging.getLogger(__name__)

BACKOFF_START_S = 1.0
BACKOFF_CAP_S = 10.0


@dataclass(frozen=True, kw_only=True)
class Evicted:
    """What an eviction round did: the pods accepted, and those a budget still refused at the deadline."""

    evicted: list[PodRef] = field(default_factory=list)
    budget_refused: dict[str, str] = field(default_factory=dict)  # ns/name -> the server's last message


@dataclass(kw_only=True)
class Evictor:
    """Evict (or with disable_eviction delete) pods; wait for them to go."""

    kube: Kube
    options: DrainOptions
    events: NodeEvents = field(default_factory=NodeEvents)
    clock: Clock = SYSTEM_CLOCK
    stop: Stop | None = None  # set when the run is interrupted: no eviction after it, waits end (Stopped)

    def evict(self, pods: list[PodRef], deadline: float) -> Evicted:
        """Send every eviction with at most options.max_parallel in flight.

        Stops sending (and stops waiting on budgets) at the first refusal that is not a budget's,
        and raises it; Ctrl-C, a signal or `stop` stops every worker at once (Stopped for `stop`).
        """
        if not pods:
            return Evicted()
        with self.stop.linked() if self.stop is not None else nullcontext(Stop()) as stop:
            outcome = self._evict_all(pods, deadline, stop)
        if self.stop is not None and self.stop.is_set():
            raise Stopped(f"stopped while evicting {len(pods)} pod(s)")
        return outcome

    def _evict_all(self, pods: list[PodRef], deadline: float, stop: Stop) -> Evicted:
        refused: dict[str, str] = {}
        errors: list[RblnError] = []
        done: list[PodRef] = []
        lock = threading.Lock()

        def work(p: PodRef) -> None:
            try:
                outcome = self._evict_one(p, deadline, stop)
            except RblnError as e:
                stop.set()
                with lock:
                    errors.append(e)
                return
            with lock:
                if isinstance(outcome, str):
                    refused[str(p)] = outcome
                elif outcome:
                    done.append(p)

        ex = ThreadPoolExecutor(max_workers=min(self.options.max_parallel, len(pods)),
                                thread_name_prefix="rblnctl-evict")
        try:
            list(ex.map(work, pods))
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
        return Evicted(evicted=done, budget_refused=refused)

    def _evict_one(self, p: PodRef, deadline: float, stop: threading.Event) -> bool | str:
        """True when evicted (or already gone), the last budget message when a budget held until the
        deadline, False when stopped because another eviction failed."""
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
                if e.status != 429:
                    raise
                attempt += 1
                # Keep the server's words ("... needs 1 healthy pods and has 1 currently"), not our request line.
                message = str(e).split(f" {e.reason} ", 1)[-1] if e.reason else str(e)
                remaining = deadline - self.clock.monotonic()
                if remaining <= 0:
                    return message
                self.events.on_pdb_blocked(p, message, attempt)
                self.clock.sleep(min(delay, remaining), stop)
                delay = min(delay * 2, BACKOFF_CAP_S)
                continue
            self.events.on_evicted(p)
            return True
        return False

    def _send(self, p: PodRef) -> None:
        options: dict[str, Any] = {}
        if self.options.grace_period_s is not None:
            options["gracePeriodSeconds"] = self.options.grace_period_s
        if self.options.server_dry_run:
            options["dryRun"] = ["All"]
        if self.options.disable_eviction:
            self.kube.delete(PODS, p.name, namespace=p.namespace, body=options or None,
                             dry_run=self.options.server_dry_run)
            return
        body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                                "metadata": {"name": p.name, "namespace": p.namespace}}
        if options:
            body["deleteOptions"] = options
        self.kube.create(PODS, body, namespace=p.namespace, sub_of=p.name, sub="eviction",
                         dry_run=self.options.server_dry_run)

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

        for ev in self.kube.watch(PODS, field_selector=f"spec.nodeName={node}", clock=self.clock, stop=self.stop,
                                  timeout_s=max(0.0, deadline - self.clock.monotonic()), poll_s=self.options.poll_s,
                                  on_retry=lambda e: self.events.on_warning(
                                      f"watching the pods on {node} failed ({e}); trying again")):
            if ev.type == SYNC:
                here = {object_key(o): _uid(o) for o in ev.objects}
                for key, p in list(pending.items()):
                    if key not in here or (p.uid and here[key] != p.uid):
                        left(key)
            elif ev.object is not None:
                key = object_key(ev.object)
                p = pending.get(key)
                if p is None:
                    continue
                same = not p.uid or _uid(ev.object) == p.uid
                # Gone: deleted; or a pod of the same name with another UID (a replacement) appeared.
                if (ev.type == "DELETED" and same) or (ev.type != "DELETED" and not same):
                    left(key)
            if not pending:
                return
        if self.stop is not None and self.stop.is_set():
            raise Stopped(f"stopped while waiting for {len(pending)} pod(s) to leave node {node}")
        raise timeout_error(self.options.timeout_s, list(pending.values()), {})


def _uid(obj: dict) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def timeout_error(timeout_s: float, pending: list[PodRef], refused: dict[str, str]) -> WaitTimeout:
    """The timeout of a drain: budgets still refusing, pods still terminating (each on its own detail line)."""
    details = []
    if refused:
        details.append("disruption budgets still refuse evicting " + ", ".join(sorted(refused)))
    if pending:
        details.append("still terminating: " + ", ".join(str(p) for p in pending))
    err = WaitTimeout(f"pods did not leave within {timeout_s:g}s")
    err.with_details(details)
    return err
