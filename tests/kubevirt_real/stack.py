"""Real KubeVirt v1.9.0 (and the real RBLN NPU Operator v0.3.0) for the suite: the workplace's stacks, started once.

Two stacks, each a ``start.sh`` of the workplace's shared folder (``$RBLNCTL_SHARED``, which ``.ci/run`` sets to
``../shared``), run from the binaries ``KUBEBUILDER_ASSETS`` (etcd, kube-apiserver, kube-scheduler,
kube-controller-manager) and ``KUBEVIRT_ASSETS`` (virt-api, virt-controller, virt-operator and the manifests
virt-operator generates) name:

* ``kubevirt``: ``$RBLNCTL_SHARED/kubevirt/start.sh`` -- a real kube-apiserver with the aggregation layer, KubeVirt's
  CRDs, webhooks and APIService, virt-api, virt-controller, virt-operator (its KubeVirt-CR webhooks only), the
  scheduler, two NPU nodes without a kubelet, a stand-in kubelet (pods Running, deletions finished) and, with
  ``FAKE_VIRT_HANDLER=1``, virt-handler's VMI status writes (Scheduled -> Running/Ready);
* ``stack``: ``$RBLNCTL_SHARED/stack/start.sh`` -- the same KubeVirt plus the real operator v0.3.0 on one apiserver,
  with a kubelet stand-in that plays device-plugin registration from the policy's resource lists (``DRIVER_READY``
  chooses whether the sandbox plugin's ``driver-ready`` init container ever finishes).

virt-operator's webhook port (8444) is fixed in KubeVirt's code, so one stack runs at a time per network namespace:
``ensure()`` stops the running one before it starts another, and the session's tests are ordered so each starts
once. Every stack's kube-apiserver also writes an audit log (``--audit-log-path``, as tests/envtest's ControlPlane),
so a test asks the server itself what rblnctl wrote. Children die with the test process: start.sh runs under
PR_SET_PDEATHSIG and stops everything it started on SIGTERM, and ``stop_all`` runs from atexit.
"""

from __future__ import annotations

import atexit
import os
import select
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.envtest.controlplane import AUDIT_POLICY, _die_with_parent

SHARED_ENV = "RBLNCTL_SHARED"
KUBEVIRT_ENV = "KUBEVIRT_ASSETS"
ASSETS_ENV = "KUBEBUILDER_ASSETS"
READY_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 40.0


class StackUnavailable(Exception):
    """The real KubeVirt tier cannot run here: one line saying which variable or file is missing."""


def scripts(which: str) -> Path:
    """The start.sh of `which` ('kubevirt' or 'stack'); StackUnavailable naming what is missing."""
    missing = [v for v in (ASSETS_ENV, KUBEVIRT_ENV, SHARED_ENV) if not os.environ.get(v, "").strip()]
    if missing:
        raise StackUnavailable(f"{' and '.join(missing)} unset: no real KubeVirt v1.9.0 to test against "
                               "(docs/testing.md: the KubeVirt tier; .ci/run sets them from ../shared)")
    script = Path(os.environ[SHARED_ENV]) / which / "start.sh"
    if not os.access(script, os.X_OK):
        raise StackUnavailable(f"{script} is missing or not executable ({SHARED_ENV}={os.environ[SHARED_ENV]})")
    for b in ("virt-api", "virt-controller", "virt-operator"):
        if not os.access(Path(os.environ[KUBEVIRT_ENV]) / "bin" / b, os.X_OK):
            raise StackUnavailable(f"{KUBEVIRT_ENV}={os.environ[KUBEVIRT_ENV]} lacks bin/{b}")
    return script


@dataclass
class Stack:
    """One running start.sh: its kubeconfig, admin token, CA, server URL and audit log."""

    which: str
    env: dict[str, str]
    workdir: Path
    popen: subprocess.Popen | None = None
    kubeconfig: Path = field(default=Path())
    url: str = ""
    token: str = ""
    ca: Path = field(default=Path())
    audit_log: Path = field(default=Path())
    output: list[str] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        return self.which, tuple(sorted(self.env.items()))

    def start(self) -> Stack:
        script = scripts(self.which)
        self.workdir.mkdir(parents=True, exist_ok=True)
        policy = self.workdir / "audit-policy.yaml"
        policy.write_text(AUDIT_POLICY)
        self.audit_log = self.workdir / "audit.log"
        run_dir = self.workdir / "run"
        env = {**os.environ, **self.env, "KEEP": "1",
               "APISERVER_EXTRA_ARGS": f"--audit-policy-file={policy} --audit-log-path={self.audit_log} "
                                       "--audit-log-mode=blocking --audit-log-maxsize=0"}
        log = open(self.workdir / "start.log", "w")  # noqa: SIM115 (the child's stderr, kept for a failure)
        self.popen = subprocess.Popen([str(script), str(run_dir)], stdout=subprocess.PIPE, stderr=log, env=env,
                                      text=True, start_new_session=True, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + READY_TIMEOUT_S
        assert self.popen.stdout is not None
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or self.popen.poll() is not None:
                tail = (self.workdir / "start.log").read_text(errors="replace").splitlines()[-25:]
                self.stop()
                raise RuntimeError(f"{script} did not print READY ({'timed out' if left <= 0 else 'exited'}):\n"
                                   + "\n".join(tail))
            ready, _, _ = select.select([self.popen.stdout], [], [], min(left, 1.0))
            if not ready:
                continue
            line = self.popen.stdout.readline()
            self.output.append(line)
            if line.startswith("READY "):
                fields = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
                self.kubeconfig = Path(fields["KUBECONFIG"])
                break
        cfg = yaml.safe_load(self.kubeconfig.read_text())
        self.url = cfg["clusters"][0]["cluster"]["server"]
        self.ca = Path(cfg["clusters"][0]["cluster"]["certificate-authority"])
        self.token = cfg["users"][0]["user"]["token"]
        return self

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log(self, name: str, lines: int = 30) -> str:
        """The last lines of one component's log in the run directory (virt-api, virt-controller, ...)."""
        for p in (self.workdir / "run" / f"{name}.log", self.workdir / "run" / "logs" / f"{name}.log"):
            if p.exists():
                return "\n".join(p.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        if self.popen is None:
            return
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.popen.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(10)
        if self.popen.stdout is not None:
            self.popen.stdout.close()
        self.popen = None


_current: Stack | None = None


def ensure(which: str, env: dict[str, str], workdir: Path) -> Stack:
    """The running stack `which` with `env`, started (after stopping any other: one per machine) when needed."""
    global _current
    want = Stack(which, dict(env), workdir)
    if _current is not None and _current.key == want.key and _current.alive():
        return _current
    stop_all()
    _current = want.start()
    return _current


def stop_all() -> None:
    global _current
    if _current is not None:
        _current.stop()
        _current = None


atexit.register(stop_all)
