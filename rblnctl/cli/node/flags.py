"""The flags of `node drain` and `node set-mode` that select, pace and drain the nodes (DrainFlags), and set-mode's
own beside them (ModeFlags): declared once, each bound to one field of the library's options (docs/node.md
"Overrides")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, ClassVar

import typer

from rblnctl.cli.options import OptionGroup, SelectorOpt, timeout_s
from rblnctl.node.defaults import DEFAULT_TIMEOUT_S

if TYPE_CHECKING:
    from rblnctl.node.options import DrainOptions, ModeOptions
    from rblnctl.node.pool import PoolOptions

AllPodsOpt = Annotated[
    bool, typer.Option("--all-pods", help="Evict every pod but DaemonSets', not only NPU users (as kubectl "
                       "drain).")
]
EmptyDirOpt = Annotated[
    bool, typer.Option("--delete-emptydir-data", help="Evict pods with emptyDir volumes (data lost).")
]
DisableEvictionOpt = Annotated[
    bool, typer.Option("--disable-eviction", help="DELETE pods: no PodDisruptionBudget holds them.")
]
GracePeriodOpt = Annotated[
    int | None,
    typer.Option("--grace-period", help="Seconds each pod gets to terminate [default: the pod's own].",
                 metavar="SECONDS", min=0, max=2**63 - 1, show_default=False),  # DeleteOptions: int64
]
TimeoutOpt = Annotated[
    str, typer.Option("--timeout", help="How long to wait (evictions, the operator): "
                      "90s, 10m, 1h.", metavar="DURATION")
]
TakeOverOpt = Annotated[
    bool, typer.Option("--take-over", help="Take over the node's lock if its holder expired.")
]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Also evict pods no controller recreates (kubectl drain "
                       "--force); nothing else.")
]
EvictVmsOpt = Annotated[
    bool, typer.Option("--evict-vms", help="Evict the VMs using the node's NPUs (they stop: "
                       "no live migration).")
]
LockNamespaceOpt = Annotated[
    str | None, typer.Option("--lock-namespace", help="The node lock's (a Lease) [default: the "
                             "operator's].", metavar="NAMESPACE", show_default=False)
]
DEFAULT_TIMEOUT = f"{DEFAULT_TIMEOUT_S / 60:g}m"
MaxUnavailableOpt = Annotated[
    str, typer.Option("--max-unavailable", metavar="N|P%", help="Nodes mid-switch at once: N, or P% of "
                      "them, rounded down (at least 1).")
]
ContinueOnErrorOpt = Annotated[
    bool, typer.Option("--continue-on-error", help="After a failure keep starting nodes, and skip "
                       "refused ones [default: start no more].")
]


class DrainFlags(OptionGroup):
    """The flags of `node drain` and `node set-mode` that select, pace and drain the nodes, declared once; bound to the
    library's options one flag to one field (docs/node.md "Overrides")."""

    selector: SelectorOpt = None
    max_unavailable: MaxUnavailableOpt = "1"
    continue_on_error: ContinueOnErrorOpt = False
    force: ForceOpt = False
    evict_vms: EvictVmsOpt = False
    all_pods: AllPodsOpt = False
    delete_emptydir_data: EmptyDirOpt = False
    disable_eviction: DisableEvictionOpt = False
    grace_period: GracePeriodOpt = None
    timeout: TimeoutOpt = DEFAULT_TIMEOUT
    take_over: TakeOverOpt = False
    lock_namespace: LockNamespaceOpt = None

    def drain_options(self, *, server_dry_run: bool) -> DrainOptions:
        from rblnctl.node.options import DrainOptions

        return DrainOptions(all_pods=self.all_pods, force=self.force, evict_vms=self.evict_vms,
                            delete_emptydir_data=self.delete_emptydir_data, disable_eviction=self.disable_eviction,
                            grace_period_s=self.grace_period, timeout_s=timeout_s(self.timeout),
                            server_dry_run=server_dry_run, take_over=self.take_over,
                            lock_namespace=self.lock_namespace)

    def pool_options(self) -> PoolOptions:
        from rblnctl.errors import InvalidInput
        from rblnctl.node.pool import MaxUnavailable, PoolOptions

        try:
            limit = MaxUnavailable.parse(self.max_unavailable)
        except InvalidInput as e:
            raise InvalidInput(f"--max-unavailable: {e}") from e
        return PoolOptions(max_unavailable=limit, continue_on_error=self.continue_on_error)


EvictDaemonsetsOpt = Annotated[
    bool, typer.Option("--evict-daemonsets", help="Evict DaemonSet pods that use the node's NPUs.")
]
SkipIommuCheckOpt = Annotated[
    bool, typer.Option("--skip-iommu-check", help="To vm although NFD reports the IOMMU off.")
]
SkipReleaseCheckOpt = Annotated[
    bool, typer.Option("--skip-release-check", help="To vm although the operator release serves no VMs "
                       "(the wait times out).")
]
ReverseOpt = Annotated[
    bool, typer.Option("--reverse", help="Go back from the node's unfinished switch to the "
                       "other mode.")
]
UncordonOpt = Annotated[
    bool, typer.Option("--uncordon/--no-uncordon", help="Uncordon at the end (if rblnctl cordoned it).")
]


class ModeFlags(DrainFlags):
    """set-mode's flags: the drain's, and the switch's own among them (in --help where they have always been)."""

    evict_daemonsets: EvictDaemonsetsOpt = False
    skip_iommu_check: SkipIommuCheckOpt = False
    skip_release_check: SkipReleaseCheckOpt = False
    reverse: ReverseOpt = False
    uncordon: UncordonOpt = True

    _order: ClassVar[tuple[str, ...]] = (
        "selector", "max_unavailable", "continue_on_error", "force", "evict_vms", "evict_daemonsets",
        "skip_iommu_check", "skip_release_check", "reverse", "all_pods", "delete_emptydir_data", "disable_eviction",
        "grace_period", "timeout", "uncordon", "take_over", "lock_namespace")

    def mode_options(self, *, server_dry_run: bool) -> ModeOptions:
        from rblnctl.node.options import ModeOptions

        return ModeOptions(drain=self.drain_options(server_dry_run=server_dry_run),
                           evict_daemonsets=self.evict_daemonsets, skip_iommu_check=self.skip_iommu_check,
                           skip_release_check=self.skip_release_check, reverse=self.reverse, uncordon=self.uncordon)
