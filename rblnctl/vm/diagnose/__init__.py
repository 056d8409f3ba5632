"""Why a VM has no NPU: walk the chain from the VM to a device and stop at the first broken link.

Two phases, as preflight's facts and checks: read_facts() reads everything the links judge, once (a
fixed set of requests for the VM's method and state), and judge() walks the links as pure functions of
those facts. Each link is PASS or FAIL with the evidence read and, when it fails, the remedy. In order:
VirtualMachine (exists, status) -> NpuRequest (the spec passes NPUs) -> FeatureGates -> VmModeNodes ->
sandbox: PermittedHostDevice, Advertised / DRA: DeviceClass, DraPlugin, ResourceSlices ->
KubeVirtSchedulable (a node that offers its NPUs carries the kubevirt.io/schedulable=true every
virt-launcher's nodeSelector asks for) -> sandbox: FreeCapacity -> Instance (a VMI exists: for a VM that
should run, what KubeVirt says instead; KubeVirt could render its pod) -> DRA: ClaimAllocated ->
Scheduling (the virt-launcher pod's FailedScheduling events, parsed) -> DRA: ClaimName (no other VM's
claim of the same name on its node) -> NodeComponents (the node's mode
and operator components, rblnctl.operator.convergence) -> Ready.

The RBLN DRA kubelet plugin's own failure states (RBLN-SW/rbln-k8s-dra-driver@37a656f, cmd/npu-kubelet-plugin):
it exits at start ("error enumerating all possible devices", main.go/state.go NewDeviceState) while neither
rbln-smi nor a vfio-pci NPU answers, so on a vm node it crash-loops until vfio-manager has bound the NPUs;
it publishes vfio devices found at start and then every 30 s (--vfio-rescan-interval, driver.go
runVfioRescan); it skips a vfio-pci NPU without an IOMMU group, logging "Skipping vfio-pci NPU without an
IOMMU group" (vfio.go enumerateVfioDevices). DraPlugin and ResourceSlices name each with its evidence.

The cluster-side checks are rblnctl.vm.cluster's, the same ones `vm attach` refuses on.
The package is split as preflight is: facts.py reads, links.py judges, model.py is the result.
"""
from __future__ import annotations

from rblnctl.kube import Kube
from rblnctl.vm.cluster import VmCluster
from rblnctl.vm.diagnose.facts import DraPlugin, Facts, Neighbour, read_facts
from rblnctl.vm.diagnose.links import SchedulingFailure, judge, parse_failed_scheduling
from rblnctl.vm.diagnose.model import FAILURES, TITLES, Link, LinkName, LinkStatus, VmDiagnosis

__all__ = ["FAILURES", "TITLES", "DraPlugin", "Facts", "Link", "LinkName", "LinkStatus", "Neighbour",
           "SchedulingFailure", "VmDiagnosis", "diagnose", "judge", "parse_failed_scheduling", "read_facts"]


def diagnose(kube: Kube, name: str, namespace: str, *, cluster: VmCluster | None = None) -> VmDiagnosis:
    """Read the facts once and walk the chain for one VM (reads only): the links up to the first broken one."""
    return judge(read_facts(kube, name, namespace, cluster=cluster))

