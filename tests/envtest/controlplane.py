"""A real Kubernetes control plane for tests, started the way controller-runtime's envtest starts one.

``KUBEBUILDER_ASSETS`` names the folder holding ``etcd`` and ``kube-apiserver`` (and, for the tests that
need them, ``kube-controller-manager``, ``kube-scheduler``, ``etcdctl``): the variable and the layout of
controller-runtime's envtest, so a developer can point it at any envtest binaries (``setup-envtest use
1.34 -p path`` downloads the official ones). ``ControlPlane`` starts them on free loopback ports with:

* TLS: a fresh CA (openssl), a serving certificate for 127.0.0.1/localhost;
* bearer-token authentication (``--token-auth-file``): ``admin`` in ``system:masters``; the controller
  manager and scheduler authenticate as their own users (they are system:masters too: the bootstrap RBAC
  for their real identities is not what a test is about);
* the RBAC authorizer, and service-account signing keys, so TokenRequest works and a test can act as a
  ServiceAccount bound to exactly the roles it gives (``user_kubeconfig``);
* an audit log (``--audit-log-path``, level Metadata, blocking): every request the server handled, with
  its user, user agent, verb and URI, which is how a test proves what rblnctl wrote (``audit``);
* kube-controller-manager with only the controllers a test tier needs (``disruption`` computes PDB
  status, ``namespace`` empties deleted namespaces), optionally kube-scheduler.

Children run in their own session with PR_SET_PDEATHSIG (SIGTERM when this process dies, even by
SIGKILL), and ``stop()`` (also registered with atexit) stops them in reverse order: SIGTERM, then SIGKILL
after a grace period. Nothing here depends on the repository's surroundings: only on the binaries.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

ASSETS_ENV = "KUBEBUILDER_ASSETS"
REQUIRED = ("etcd", "kube-apiserver")
ADMIN_USER = "admin"
_PR_SET_PDEATHSIG = 1

AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  users: [system:kube-controller-manager, system:kube-scheduler, system:apiserver]
- level: None
  nonResourceURLs: ["/healthz*", "/readyz*", "/livez*"]
- level: Metadata
"""



def terminate(popen: subprocess.Popen, grace_s: float = 15) -> None:
    """SIGTERM, then SIGKILL when it has not ended within `grace_s`: how every test process here is stopped."""
    popen.terminate()
    try:
        popen.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait(timeout=5)

class EnvtestUnavailable(Exception):
    """The real control plane cannot run here (no KUBEBUILDER_ASSETS, missing binaries, no openssl)."""


def assets_dir() -> Path:
    """The binaries' folder from KUBEBUILDER_ASSETS; EnvtestUnavailable (one line: why) when unusable."""
    value = os.environ.get(ASSETS_ENV, "").strip()
    if not value:
        raise EnvtestUnavailable(f"{ASSETS_ENV} is not set: no real control plane to test against "
                                 "(docs/testing.md says how to point it at envtest binaries)")
    path = Path(value)
    missing = [b for b in REQUIRED if not os.access(path / b, os.X_OK)]
    if missing:
        raise EnvtestUnavailable(f"{ASSETS_ENV}={value} lacks {', '.join(missing)}")
    if shutil.which("openssl") is None:
        raise EnvtestUnavailable("openssl is not on PATH (the control plane's certificates are made with it)")
    return path


def free_ports(n: int) -> list[int]:
    """`n` distinct free loopback ports (bound, then released: a tiny race, as in envtest)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@dataclass
class Process:
    name: str
    popen: subprocess.Popen
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class ControlPlane:
    """etcd + kube-apiserver (+ kube-controller-manager, kube-scheduler) on loopback; see the module doc."""

    workdir: Path
    assets: Path = field(default_factory=assets_dir)
    controllers: tuple[str, ...] = ("disruption", "namespace")  # () = no kube-controller-manager
    scheduler: bool = False
    apiserver_args: tuple[str, ...] = ()
    ready_timeout_s: float = 120.0

    url: str = field(default="", init=False)
    ca: Path = field(init=False)
    admin_token: str = field(default="", init=False)
    etcd_url: str = field(default="", init=False)
    audit_log: Path = field(init=False)
    processes: list[Process] = field(default_factory=list, init=False)
    started_in_s: float = field(default=0.0, init=False)
    version: str = field(default="", init=False)

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self) -> "ControlPlane":
        t0 = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        try:
            self._pki()
            self._start_etcd()
            self._start_apiserver()
            self._write_kubeconfig(self.workdir / "kubeconfig", ADMIN_USER, self.admin_token)
            if self.controllers:
                self._start_controller_manager()
            if self.scheduler:
                self._start_scheduler()
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Stop every process, last started first (SIGTERM, SIGKILL after 15 s). Idempotent."""
        while self.processes:
            p = self.processes.pop()
            if p.alive():
                terminate(p.popen)
        atexit.unregister(self.stop)

    def __enter__(self) -> "ControlPlane":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def check_alive(self) -> None:
        """Raise RuntimeError naming a component that exited, with the end of its log."""
        for p in self.processes:
            if not p.alive():
                raise RuntimeError(f"{p.name} exited ({p.popen.returncode}):\n{p.tail()}")

    # ---- access ----------------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        """The admin's kubeconfig (context ``envtest``, namespace ``default``)."""
        return self.workdir / "kubeconfig"

    def write_kubeconfig(self, path: Path, *, user: str, token: str, namespace: str | None = None,
                         server: str | None = None) -> Path:
        """A kubeconfig for `user` with a bearer `token` (optionally another server URL, e.g. a proxy)."""
        return self._write_kubeconfig(path, user, token, namespace=namespace, server=server)

    def _write_kubeconfig(self, path: Path, user: str, token: str, *, namespace: str | None = None,
                          server: str | None = None) -> Path:
        ctx: dict = {"cluster": "envtest", "user": user}
        if namespace:
            ctx["namespace"] = namespace
        doc = {
            "apiVersion": "v1", "kind": "Config", "current-context": "envtest",
            "clusters": [{"name": "envtest", "cluster": {"server": server or self.url,
                                                          "certificate-authority": str(self.ca)}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "envtest", "context": ctx}],
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1))
        return path

    # ---- the pieces ------------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str]) -> Process:
        log = self.workdir / f"{name}.log"
        out = open(log, "ab")  # noqa: SIM115 - the child owns it; closed when the Popen is collected
        popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 cwd=self.workdir, start_new_session=True, preexec_fn=_die_with_parent)
        out.close()
        proc = Process(name, popen, log)
        self.processes.append(proc)
        return proc

    def _pki(self) -> None:
        d = self.workdir / "certs"
        d.mkdir(exist_ok=True)
        for args in (
            ("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ca.key"),
            ("req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=envtest-ca", "-days", "30", "-out", "ca.crt"),
            ("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "apiserver.key"),
            ("req", "-new", "-key", "apiserver.key", "-subj", "/CN=kube-apiserver", "-out", "apiserver.csr"),
        ):
            _openssl(*args, cwd=d)
        (d / "ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc,IP:10.0.0.1\n"
                               "extendedKeyUsage=serverAuth\n")
        _openssl("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", "30", "-extfile", "ext", "-out", "apiserver.crt", cwd=d)
        _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key", cwd=d)
        _openssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)
        self.ca = d / "ca.crt"
        self.admin_token = os.urandom(16).hex()
        self._kcm_token, self._sched_token = os.urandom(16).hex(), os.urandom(16).hex()
        (d / "tokens.csv").write_text(
            f"{self.admin_token},{ADMIN_USER},admin,system:masters\n"
            f"{self._kcm_token},system:kube-controller-manager,kcm,system:masters\n"
            f"{self._sched_token},system:kube-scheduler,scheduler,system:masters\n")
        (self.workdir / "audit-policy.yaml").write_text(AUDIT_POLICY)

    def _start_etcd(self) -> None:
        client, peer, metrics = free_ports(3)
        self.etcd_url = f"http://127.0.0.1:{client}"
        proc = self._spawn("etcd", [
            str(self.assets / "etcd"), "--name", "envtest", "--data-dir", str(self.workdir / "etcd"),
            "--unsafe-no-fsync", "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{peer}", "--initial-cluster", f"envtest=http://127.0.0.1:{peer}",
            "--listen-metrics-urls", f"http://127.0.0.1:{metrics}"])
        self._wait(proc, lambda: _http_ok(f"{self.etcd_url}/health"), "etcd /health")

    def _start_apiserver(self) -> None:
        (port,) = free_ports(1)
        d = self.workdir / "certs"
        self.url = f"https://127.0.0.1:{port}"
        self.audit_log = self.workdir / "audit.log"
        proc = self._spawn("kube-apiserver", [
            str(self.assets / "kube-apiserver"), f"--etcd-servers={self.etcd_url}", f"--cert-dir={d}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={port}",
            f"--tls-cert-file={d / 'apiserver.crt'}", f"--tls-private-key-file={d / 'apiserver.key'}",
            f"--client-ca-file={d / 'ca.crt'}", f"--token-auth-file={d / 'tokens.csv'}",
            "--service-cluster-ip-range=10.0.0.0/24", "--allow-privileged=true", "--authorization-mode=RBAC",
            # envtest's defaults: no ServiceAccount admission (no token controller runs to feed it)
            "--disable-admission-plugins=ServiceAccount",
            f"--service-account-issuer={self.url}/", f"--service-account-key-file={d / 'sa.pub'}",
            f"--service-account-signing-key-file={d / 'sa.key'}",
            f"--audit-log-path={self.audit_log}", f"--audit-policy-file={self.workdir / 'audit-policy.yaml'}",
            "--audit-log-mode=blocking", "--audit-log-format=json", "--audit-log-maxsize=0",
            *self.apiserver_args])
        self._wait(proc, lambda: _http_ok(f"{self.url}/readyz", token=self.admin_token, ca=self.ca), "/readyz")
        info = json.loads(_http_get(f"{self.url}/version", token=self.admin_token, ca=self.ca))
        self.version = str(info.get("gitVersion") or "")

    def _start_controller_manager(self) -> None:
        kc = self._write_kubeconfig(self.workdir / "kcm.kubeconfig", "system:kube-controller-manager",
                                    self._kcm_token)
        self._spawn("kube-controller-manager", [
            str(self.assets / "kube-controller-manager"), f"--kubeconfig={kc}", "--bind-address=127.0.0.1",
            "--secure-port=0", f"--controllers={','.join(self.controllers)}",
            f"--service-account-private-key-file={self.workdir / 'certs' / 'sa.key'}",
            f"--root-ca-file={self.ca}", "--leader-elect=false"])

    def _start_scheduler(self) -> None:
        kc = self._write_kubeconfig(self.workdir / "scheduler.kubeconfig", "system:kube-scheduler",
                                    self._sched_token)
        self._spawn("kube-scheduler", [str(self.assets / "kube-scheduler"), f"--kubeconfig={kc}",
                                       "--leader-elect=false", "--secure-port=0", "--bind-address=127.0.0.1"])

    def _wait(self, proc: Process, ready: object, what: str) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited before {what} ({proc.popen.returncode}):\n{proc.tail()}")
            if ready():  # type: ignore[operator]
                return
            time.sleep(0.05)
        raise RuntimeError(f"{proc.name}: no {what} after {self.ready_timeout_s:g}s:\n{proc.tail()}")


def _http_get(url: str, *, token: str | None = None, ca: Path | None = None, timeout: float = 2.0) -> bytes:
    import ssl
    import urllib.request

    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    ctx = ssl.create_default_context(cafile=str(ca)) if ca else None
    with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:
        return resp.read()


def _http_ok(url: str, **kw: object) -> bool:
    try:
        body = _http_get(url, **kw)  # type: ignore[arg-type]
    except OSError:
        return False
    return body.strip() == b"ok" or b'"health":"true"' in body
