"""Pytest fixtures for the real control plane (tests/conftest.py re-exports them).

* ``control_plane`` (session): etcd + kube-apiserver + kube-controller-manager (disruption, namespace) with
  the CRDs rblnctl meets installed from their sources (tests/envtest/crds): the operator v0.3.0's, NFD's,
  KubeVirt's.
* ``bare_control_plane`` (session): a second one with no CRD at all: a cluster before KubeVirt, NFD and the
  operator are installed.
* ``real`` / ``bare``: a RealBackend on each, wiped after every test (RealBackend.sweep), so tests are isolated
  while the control plane is started once.
* ``backend``: parametrised, ``fake`` then ``real``: one scenario on both API servers. The real variant is
  marked ``envtest``.
* ``operator_stack`` (module): the real RBLN NPU Operator v0.3.0 reconciling two NPU nodes on a control plane of
  its own (tests/envtest/operator_stack.py), started once per module that uses it and stopped after it (it is
  the heaviest piece of the suite); ``operator_cluster``: the same, put back after each test
  (``OperatorStack.reset``: container mode, uncordoned, converged).

Every test that uses a real control plane gets the ``envtest`` marker (``pytest -m envtest``), and when
KUBEBUILDER_ASSETS is unset they are skipped with one line saying so (the skip is raised by the session
fixture, so pytest's summary groups them on one line).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.backend import FakeBackend, RealBackend
from tests.cluster.client import Api, ApiFailure
from tests.envtest.controlplane import ControlPlane, EnvtestUnavailable, assets_dir
from tests.envtest.crds import kubevirt_crds, later_policy_crd, nfd_crds, operator_crds_v030
from tests.envtest.operator_stack import OperatorStack, operator_assets

ENVTEST_FIXTURES = frozenset({"control_plane", "bare_control_plane", "real", "bare", "operator_stack",
                              "operator_cluster"})


def install_crds(api: Api, crds: list[dict], *, timeout_s: float = 60.0) -> None:
    """Create each CRD (or replace its spec) and wait until the server serves it (Established)."""
    for crd in crds:
        try:
            api.create(crd)
        except ApiFailure as e:
            if e.status != 409:
                raise
            api.mutate("CustomResourceDefinition", crd["metadata"]["name"], None,
                       lambda o, c=crd: o.update(spec=c["spec"], metadata={**o["metadata"], **{
                           "annotations": c["metadata"].get("annotations") or {}}}))
    for crd in crds:
        name = crd["metadata"]["name"]

        def established(n: str = name) -> bool:
            obj = api.get("CustomResourceDefinition", n) or {}
            return any(c.get("type") == "Established" and c.get("status") == "True"
                       for c in (obj.get("status") or {}).get("conditions") or [])

        api.wait_for(established, timeout_s=timeout_s, message=f"CRD {name} Established")
    # Established comes a moment before the group is in discovery and its REST paths answer.
    for crd in crds:
        spec = crd["spec"]
        path = f"/apis/{spec['group']}/{spec['versions'][0]['name']}/{spec['names']['plural']}"

        def served(p: str = path) -> bool:
            try:
                api.request("GET", p, query={"limit": 1})
                return True
            except ApiFailure:
                return False

        api.wait_for(served, timeout_s=timeout_s, message=f"{path} served")


def _start(tmp_path_factory: pytest.TempPathFactory, name: str, **kw: object) -> ControlPlane:
    try:
        assets = assets_dir()
    except EnvtestUnavailable as e:
        pytest.skip(str(e))
    return ControlPlane(tmp_path_factory.mktemp(name), assets=assets, **kw).start()  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A real control plane with the operator v0.3.0's, NFD's and KubeVirt's CRDs."""
    cp = _start(tmp_path_factory, "envtest")
    try:
        api = Api(cp.url, token=cp.admin_token, ca=str(cp.ca))
        install_crds(api, operator_crds_v030(cp.assets) + nfd_crds() + kubevirt_crds())
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def bare_control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A real control plane with no CRD installed: KubeVirt, NFD and the operator are not there yet."""
    cp = _start(tmp_path_factory, "envtest-bare", controllers=())
    try:
        yield cp
    finally:
        cp.stop()


def _session_backend(cp: ControlPlane, workdir: Path) -> RealBackend:
    b = RealBackend(cp, workdir)
    # The namespaces the scenarios use exist from the start (deleting one takes the namespace controller
    # seconds, and a test reusing its name would wait): sweep() empties them instead.
    for ns in ("rbln-system", "kubevirt", "node-feature-discovery", "vms", "team-a", "team-b"):
        try:
            b.api.create({"kind": "Namespace", "metadata": {"name": ns}})
        except ApiFailure as e:
            if e.status != 409:
                raise
    b.snapshot()
    return b


@pytest.fixture(scope="session")
def _real_session(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealBackend]:
    b = _session_backend(control_plane, tmp_path_factory.mktemp("real-backend"))
    yield b
    b.stop()


@pytest.fixture(scope="session")
def _bare_session(bare_control_plane: ControlPlane,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealBackend]:
    b = _session_backend(bare_control_plane, tmp_path_factory.mktemp("bare-backend"))
    yield b
    b.stop()


@pytest.fixture
def real(_real_session: RealBackend) -> Iterator[RealBackend]:
    """The real control plane, as the RealBackend a test acts through; wiped after the test."""
    _real_session.mark()
    try:
        yield _real_session
    finally:
        _real_session.sweep()
        _real_session.control_plane.check_alive()


@pytest.fixture
def bare(_bare_session: RealBackend) -> Iterator[RealBackend]:
    """The CRD-less control plane; wiped after the test."""
    _bare_session.mark()
    try:
        yield _bare_session
    finally:
        _bare_session.sweep()


@pytest.fixture(scope="module")
def later_policy_crd_installed(_real_session: RealBackend) -> Iterator[dict]:
    """The session's control plane serves the later operator's RBLNClusterPolicy CRD (CEL rules, no resourceList)
    for the tests of one module; chart v0.3.0's comes back after them. (Module-scoped: a swap costs seconds.)"""
    api = _real_session.api
    v030 = {c["metadata"]["name"]: c for c in operator_crds_v030(_real_session.control_plane.assets)}
    policy = v030.get("rblnclusterpolicies.rebellions.ai")
    if policy is None:
        pytest.skip("the envtest bundle has no operator chart (chart/rbln-npu-operator/crds)")
    later = later_policy_crd(policy)
    install_crds(api, [later])
    try:
        yield later
    finally:
        for p in api.list("RBLNClusterPolicy"):  # made under these rules: gone before the old ones return
            api.delete("RBLNClusterPolicy", p["metadata"]["name"])
        install_crds(api, [policy])


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.envtest)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FakeBackend | RealBackend]:
    """The same scenario on the fake API server and on the real one."""
    if request.param == "real":
        yield request.getfixturevalue("real")
        return
    fake = request.getfixturevalue("apiserver")
    b = FakeBackend(fake, tmp_path)
    b.mark()
    try:
        yield b
    finally:
        b.close()


@pytest.fixture(scope="module")
def operator_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorStack]:
    """The real operator v0.3.0's stack (tests/envtest/operator_stack.py); skipped, with the reason, when
    KUBEBUILDER_ASSETS lacks the control plane or the operator's binaries."""
    try:
        assets = operator_assets()
    except EnvtestUnavailable as e:
        pytest.skip(str(e))
    stack = OperatorStack(tmp_path_factory.mktemp("operator"), assets=assets).start()
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def operator_cluster(operator_stack: OperatorStack) -> Iterator[OperatorStack]:
    """operator_stack, put back after the test: container mode, uncordoned, converged (OperatorStack.reset)."""
    operator_stack.check_alive()
    try:
        yield operator_stack
    finally:
        operator_stack.reset()


def wait_until(what: object, *, timeout_s: float = 30.0, message: str = "condition") -> object:
    """Poll `what()` until truthy (AssertionError naming `message` after the timeout)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = what()  # type: ignore[operator]
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g}s waiting for {message}")
        time.sleep(0.05)
