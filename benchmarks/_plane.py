"""The control plane the real-server benchmarks run on, and the cluster-wide objects every one of them seeds.

One place for what benchmarks/fleet.py and benchmarks/real_server.py both do: start the suite's envtest control
plane (tests/envtest: etcd + kube-apiserver from KUBEBUILDER_ASSETS, TLS, token auth), install the operator
v0.3.0's, NFD's and KubeVirt's CRDs as tests/envtest installs them, and seed the namespaces, the RBLNClusterPolicy,
the operator's Deployment and the KubeVirt CR (HostDevices gate, v1.9.0).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

NFD = "feature.node.kubernetes.io/pci-1200_1eff.present=true"


class Unavailable(Exception):
    """No envtest binaries (KUBEBUILDER_ASSETS) or no kubectl on PATH: the benchmark cannot run."""


def kubectl() -> str:
    """The kubectl on PATH (every real-server benchmark's anchor)."""
    found = shutil.which("kubectl")
    if found is None:
        raise Unavailable("kubectl is not on PATH (the anchor)")
    return found


@contextmanager
def control_plane(run_dir: Path) -> Iterator[tuple[object, object]]:
    """(ControlPlane, tests.cluster.client.Api as its admin) with the CRDs installed; stopped on exit."""
    from tests.cluster.client import Api
    from tests.envtest.controlplane import ControlPlane, EnvtestUnavailable, assets_dir
    from tests.envtest.crds import kubevirt_crds, nfd_crds, operator_crds_v030
    from tests.envtest.fixtures import install_crds

    try:
        assets = assets_dir()
    except EnvtestUnavailable as e:
        raise Unavailable(str(e)) from e
    with ControlPlane(run_dir, assets=assets, controllers=()) as cp:
        api = Api(cp.url, token=cp.admin_token, ca=str(cp.ca))
        api._ca = str(cp.ca)
        install_crds(api, operator_crds_v030(assets) + nfd_crds() + kubevirt_crds())
        yield cp, api


def seed_cluster(api: object, namespaces: list[str]) -> None:
    """The namespaces (rbln-system and kubevirt first), the v0.3.0 policy (vfio-manager, sandbox), the operator's
    Deployment and a KubeVirt CR with the HostDevices gate."""
    from tests.fakes import objects as o
    from tests.fakes.releases import V0_3_0

    for ns in dict.fromkeys(["rbln-system", "kubevirt", *namespaces]):
        api.create({"kind": "Namespace", "metadata": {"name": ns}})  # type: ignore[attr-defined]
    api.seed(V0_3_0.policy(vfio_manager=True, sandbox=True), V0_3_0.operator_deployment(),  # type: ignore[attr-defined]
             o.kubevirt(feature_gates=["HostDevices"], version="v1.9.0"))
