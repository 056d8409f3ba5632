"""Evict pods with a bounded number of requests in flight, and wait until they have left the node.

Evictions go through the policy/v1 Eviction API, so PodDisruptionBudgets hold: a 429 is retried
with exponential backoff (1 s doubling to 10 s, the last wait cut so the final try happens at the
deadline) and reported live; a 404 means the pod is already gone. The wait costs one paged LIST of
the node's pods per round (fieldSelector spec.nodeName), whatever the number of pods: a pod has
left when it is absent or a pod of the same name has another UID (kubectl's rule).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from rblnctl.clock import SYSTEM_CLOCK, Clock
from rblnctl.errors import ClusterError, ClusterUnreachable, NotFound, RblnError, WaitTimeout
from rblnctl.kube import PODS, Kube, is_transient
from rblnctl.node.events import NodeEvents
from rblnctl.node.options import DrainOptions
from rblnctl.node.pods import PodRef

log = logging.getLogger(__name__)

BACKOFF_START_S = 1.0
BACKOFF_CAP_S = 10.0
FIRST_POLL_S = 0.1  # the wait's first pause; it doubles up to options.poll_s


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

    def evict(self, pods: list[PodRef], deadline: float) -> Evicted:
        """Send every eviction with at most options.max_parallel in flight.

        Stops sending (and stops waiting on budgets) at the first refusal that is not a budget's,
        and raises it; Ctrl-C or a signal stops every worker at once.
        """
        if not pods:
            return Evicted()
        stop = threading.Event()
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
        """Wait until every pod in `pods` has left `node`: one LIST per round. Raises WaitTimeout naming the rest.

        A failed LIST that may pass (throttling, a 5xx, the API server restarting) is reported and
        retried until the deadline.
        """
        pending = {(p.namespace, p.name): p for p in pods}
        pause = FIRST_POLL_S
        while pending:
            try:
                here = {(md.get("namespace", ""), md["name"]): md.get("uid", "")
                        for md in (o["metadata"] for o in self.kube.iter_list(
                            PODS, field_selector=f"spec.nodeName={node}"))}
            except (ClusterError, ClusterUnreachable) as e:
                if not is_transient(e) or self.clock.monotonic() >= deadline:
                    raise
                self.events.on_warning(f"listing the pods on {node} failed ({e}); trying again")
                here = None
            if here is not None:
                for key, p in list(pending.items()):
                    if key not in here or (p.uid and here[key] != p.uid):
                        self.events.on_gone(p)
                        del pending[key]
            if not pending:
                return
            if self.clock.monotonic() >= deadline:
                raise timeout_error(self.options.timeout_s, list(pending.values()), {})
            self.clock.sleep(max(0.0, min(pause, deadline - self.clock.monotonic())))
            pause = min(pause * 2, self.options.poll_s)


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
