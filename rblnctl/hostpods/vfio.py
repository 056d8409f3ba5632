"""`vfio status --node`: vfio_status() of one node, run in a host pod and read back from its log."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from rblnctl import constants as C
from rblnctl.clock import SYSTEM_CLOCK, Clock
from rblnctl.errors import HostPodFailed, RblnError
from rblnctl.host import pci
from rblnctl.host.vfio.model import VfioStatus
from rblnctl.host.vfio.status import VFIO_STATUS_PATHS
from rblnctl.hostpods.runner import HostPodRunner, PodOutcome, PodState, json_document
from rblnctl.hostpods.spec import HostCommand, default_image
from rblnctl.kube import Kube, validate_name

STATUS_KIND = "VfioStatus"  # the document kind `vfio status -o json` prints (docs/output.md)
_IN_POD = re.compile(rf"(?<![\w/]){re.escape(C.HOST_POD_ROOT)}(?=/)")


def vfio_status_command(bdfs: Sequence[str] = (), *, all_vendors: bool = False) -> HostCommand:
    """`rblnctl vfio status -o json --root /host [BDF...] [--all-vendors]` with the directories it reads."""
    args = ("vfio", "status", "-o", "json", "--root", C.HOST_POD_ROOT, *bdfs)
    return HostCommand(name="vfio-status", args=args + (("--all-vendors",) if all_vendors else ()),
                       host_paths=VFIO_STATUS_PATHS)


def _quiet(_: RblnError) -> None:
    return None


def _on_node(text: str | None) -> str | None:
    """A path the pod saw (`/host/dev/vfio/42`) as it is on the node (`/dev/vfio/42`)."""
    return _IN_POD.sub("", text) if text else text


def _failure(o: PodOutcome, namespace: str, image: str) -> HostPodFailed:
    where = f"vfio status on node {o.node} (pod {namespace}/{o.pod})"
    if o.state == PodState.COMPLETED:
        last = next((ln.strip() for ln in reversed(o.log.splitlines()) if ln.strip()), "no output")
        return HostPodFailed(f"{where} exited {o.exit_code}: {last}")
    if o.state == PodState.IMAGE_PULL:
        return HostPodFailed(f"{where}: image {image} cannot be pulled ({o.reason}: {o.message}); pass --image")
    if o.state == PodState.UNSCHEDULABLE:
        return HostPodFailed(f"{where} cannot be scheduled: {o.message}")
    if o.state == PodState.REJECTED:
        return HostPodFailed(f"{where} was rejected by the kubelet: {o.reason}: {o.message}")
    return HostPodFailed(f"{where}: {o.message}")


@dataclass(kw_only=True)
class RemoteVfioStatus:
    """Run `vfio status` on `node` in a host pod (deleted afterwards unless `keep`); `run()` returns its VfioStatus."""

    kube: Kube
    node: str
    image: str = field(default_factory=default_image)
    namespace: str = C.OPERATOR_NAMESPACE
    timeout_s: float = 120.0
    poll_interval_s: float = 1.0
    keep: bool = False
    clock: Clock = SYSTEM_CLOCK
    on_retry: Callable[[RblnError], None] = _quiet  # the pod's watch, create or delete tried again (HostPodRunner)

    def run(self, bdfs: Sequence[str] = (), *, all_vendors: bool = False) -> VfioStatus:
        """The node's VfioStatus, its paths as the node names them (`/dev/vfio/42`, not the pod's `/host/...`).

        Bad BDFs are InvalidInput before any pod is made; a pod that gives no status is HostPodFailed.
        """
        validate_name(self.node)
        wanted = pci.normalize_bdfs(bdfs)
        runner = HostPodRunner(kube=self.kube, command=vfio_status_command(wanted, all_vendors=all_vendors),
                               image=self.image, namespace=self.namespace, max_parallel=1, timeout_s=self.timeout_s,
                               poll_interval_s=self.poll_interval_s, keep=self.keep, clock=self.clock,
                               on_retry=self.on_retry)
        [outcome] = runner.run([self.node]).outcomes
        if outcome.state != PodState.COMPLETED or outcome.exit_code != 0:
            raise _failure(outcome, self.namespace, self.image)
        try:
            data = json_document(outcome.log)
            if data.get("kind", STATUS_KIND) != STATUS_KIND:
                raise ValueError(f"a {data.get('kind')} document, not {STATUS_KIND}")
            st = VfioStatus.from_dict(data)
        except (KeyError, TypeError, ValueError) as e:
            raise HostPodFailed(f"vfio status on node {self.node} printed no status ({e}); make sure {self.image} "
                                "runs the same rblnctl as this one") from e
        return VfioStatus(searched=_on_node(st.searched) or "", warnings=tuple(_on_node(w) or "" for w in st.warnings),
                          devices=tuple(replace(d, vfio_device=_on_node(d.vfio_device)) for d in st.devices))
