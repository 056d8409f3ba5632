"""`vfio status --node`: vfio_status() run in a host pod on the node, read back with the node's own paths."""

from __future__ import annotations

import dataclasses
import shutil

import pytest

from rblnctl.errors import HostPodFailed, InvalidInput
from rblnctl.host.vfio import vfio_status
from rblnctl.host.vfio.status import VFIO_STATUS_PATHS
from rblnctl.hostpods.vfio import RemoteVfioStatus
from tests.fakes import sysfs as ht
from tests.fakes.clock import FakeClock
from tests.fakes.hostkubelet import HostKubelet
from tests.hostpods.conftest import add_nodes
from rblnctl.constants import HOST_POD_LABEL as LABEL


@pytest.fixture
def vm_host(tmp_path):
    """NPUs on vfio-pci, QEMU holding /dev/vfio/42 open."""
    return ht.build_host(tmp_path / "vm-host", ht.npu_on_vfio()).root


@pytest.fixture
def kubelet(apiserver, vm_host):
    k = HostKubelet(apiserver, default=vm_host).start()
    yield k
    k.stop()
    assert k.errors == []


def remote(kube, **kw) -> RemoteVfioStatus:
    return RemoteVfioStatus(**({"kube": kube, "node": "n0", "image": "registry.local/rblnctl:t", "clock": FakeClock()}
                               | kw))


def test_status_of_a_node_with_the_nodes_paths(apiserver, kube, kubelet, vm_host):
    add_nodes(apiserver, 1)
    st = remote(kube).run()
    local = vfio_status(root=vm_host)
    assert [d.bdf for d in st.devices] == [d.bdf for d in local.devices] == ["0000:3b:00.0", "0000:5e:00.0"]
    d = st.devices[0]
    assert d.driver == "vfio-pci" and d.iommu_group == "42" and d.vfio_device == "/dev/vfio/42"
    assert [(h.pid, h.command.split()[0]) for h in d.holders] == [(5151, "/usr/libexec/qemu-kvm")]
    assert st.searched == "/sys/bus/pci/devices"
    assert dataclasses.replace(d, vfio_device=local.devices[0].vfio_device) == local.devices[0]
    [(node, argv)] = kubelet.runs
    assert node == "n0" and argv == ["vfio", "status", "-o", "json", "--root", str(vm_host)]
    assert [p for p in apiserver.list("Pod") if LABEL in p["metadata"]["labels"]] == []
    [post] = apiserver.requests_matching("POST", r"/pods$")
    assert [v["hostPath"]["path"] for v in post.body["spec"]["volumes"]] == ["/sys", "/proc", "/dev", "/run"]


def test_a_failed_list_of_the_pod_is_told_to_on_retry_and_the_status_still_read(apiserver, kube, kubelet):
    """The pod's LIST answers 503 past the client's own read retries: on_retry hears of it (vfio status --node says
    `retrying:`), the watch tries again and the node's status is read as without the fault."""
    from rblnctl.kube.client import READ_RETRIES

    add_nodes(apiserver, 1)
    kube.clock = clock = FakeClock()
    apiserver.inject_fault(method="GET", path=r"/namespaces/rbln-system/pods$", watch=False, status=503,
                           times=READ_RETRIES + 1)
    heard: list[Exception] = []
    st = remote(kube, clock=clock, on_retry=heard.append).run()
    assert [d.bdf for d in st.devices] == ["0000:3b:00.0", "0000:5e:00.0"]
    assert [getattr(e, "status", None) for e in heard] == [503]


def test_bdfs_and_all_vendors_are_passed_to_the_pod(apiserver, kube, kubelet):
    add_nodes(apiserver, 1)
    st = remote(kube).run(["3b:00.0"], all_vendors=True)
    assert [d.bdf for d in st.devices] == ["0000:3b:00.0"]
    assert kubelet.runs[0][1][-2:] == ["0000:3b:00.0", "--all-vendors"]


def test_bad_bdf_is_refused_before_any_pod(apiserver, kube, kubelet):
    add_nodes(apiserver, 1)
    with pytest.raises(InvalidInput):
        remote(kube).run(["zz:00.0"])
    assert apiserver.requests_matching("POST", r"/pods$") == []


def test_a_failing_command_is_host_pod_failed_with_its_error_line(apiserver, kube, kubelet):
    add_nodes(apiserver, 1)
    with pytest.raises(HostPodFailed, match=r"vfio status on node n0 .* exited 1: error: .*0000:99:00.0"):
        remote(kube).run(["0000:99:00.0"])


def test_an_image_that_cannot_be_pulled_says_so(apiserver, kube, kubelet):
    add_nodes(apiserver, 1)
    kubelet.image_pull["n0"] = "ErrImagePull"
    with pytest.raises(HostPodFailed, match=r"image registry.local/rblnctl:t cannot be pulled \(ErrImagePull"):
        remote(kube).run()
    assert [p for p in apiserver.list("Pod") if LABEL in p["metadata"]["labels"]] == []


def test_status_needs_nothing_outside_its_mounts(tmp_path, vm_host):
    only = tmp_path / "only"
    for rel in VFIO_STATUS_PATHS:
        if (vm_host / rel).exists():
            shutil.copytree(vm_host / rel, only / rel, symlinks=True)
    full, part = vfio_status(root=vm_host), vfio_status(root=only)
    assert [dataclasses.replace(d, vfio_device=None) for d in part.devices] == \
        [dataclasses.replace(d, vfio_device=None) for d in full.devices]
    assert [d.vfio_device_present for d in part.devices] == [True, True] and part.warnings == full.warnings
