"""What a drain and a mode switch may do: frozen options, defaults stated once (rblnctl.node.defaults)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rblnctl.errors import InvalidInput
from rblnctl.node.defaults import DEFAULT_LOCK_DURATION_S, DEFAULT_MAX_PARALLEL, DEFAULT_POLL_S, DEFAULT_TIMEOUT_S


@dataclass(frozen=True, kw_only=True)
class DrainOptions:
    """How pods leave a node; the fields mirror kubectl drain's flags (a None grace period: each pod's own)."""

    all_pods: bool = False  # evict every pod not managed by a DaemonSet, not only NPU consumers
    force: bool = False  # evict pods without a controller (they are not recreated): kubectl drain's --force
    delete_emptydir_data: bool = False  # evict pods with emptyDir volumes (their data is lost)
    evict_vms: bool = False  # evict virt-launcher pods holding NPUs (the VM stops unless it can restart elsewhere);
    # set-mode: go past its VM guard
    disable_eviction: bool = False  # DELETE instead of the Eviction API: bypasses PodDisruptionBudgets
    grace_period_s: int | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S  # evictions (budget retries included) and the wait for pods to go
    poll_s: float = DEFAULT_POLL_S
    max_parallel: int = DEFAULT_MAX_PARALLEL
    server_dry_run: bool = False  # send writes with dryRun=All; nothing persists
    take_over: bool = False  # take over a lock whose holder stopped renewing it
    lock_namespace: str | None = None  # where the node's Lease lives (None: the operator's namespace)
    lock_duration_s: int = DEFAULT_LOCK_DURATION_S

    def __post_init__(self) -> None:
        if self.max_parallel < 1:
            raise InvalidInput(f"max_parallel must be at least 1, not {self.max_parallel}")
        if self.grace_period_s is not None and self.grace_period_s < 0:
            raise InvalidInput(f"grace period must be 0 or more seconds, not {self.grace_period_s}")
        for what, value in (("timeout", self.timeout_s), ("poll interval", self.poll_s)):
            if not math.isfinite(value) or value <= 0:
                raise InvalidInput(f"{what} must be a finite number of seconds above 0, not {value}")
        if self.lock_duration_s < 5:
            raise InvalidInput(f"lock duration must be at least 5 seconds, not {self.lock_duration_s}")


@dataclass(frozen=True, kw_only=True)
class ModeOptions:
    """How a mode switch runs; `drain` is passed through to the drain it makes, never copied."""

    drain: DrainOptions = field(default_factory=DrainOptions)  # its evict_vms also passes set-mode's VM guard
    # Each override has one meaning (docs/node.md, "Overrides"); a blocker names the one that lifts it.
    evict_daemonsets: bool = False  # evict DaemonSet pods that use the node's NPUs (they come straight back)
    skip_iommu_check: bool = False  # switch to vm although NFD reports the node's IOMMU off for its NPUs
    skip_release_check: bool = False  # switch to vm although the operator release serves VMs through none of the
    # policy's allocators (the wait then times out)
    reverse: bool = False  # switch although a switch of the node to the other mode is unfinished (go back)
    uncordon: bool = True  # uncordon at the end (only ever a node rblnctl cordoned)
    operator_namespace: str | None = None  # None: the policy's spec.namespace, else the operator's own
