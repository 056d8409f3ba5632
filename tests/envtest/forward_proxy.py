"""A real forward proxy for tests: proxy.py (PyPI `proxy.py`, a maintained HTTP/HTTPS proxy with CONNECT tunnels and
`--basic-auth`) started as a process on a free loopback port, in front of the envtest apiserver.

Its resolver knows names this machine's DNS does not (tests/envtest/proxy_hosts.py): a kubeconfig whose server is
`https://kubernetes.default.svc:PORT` (a name in the apiserver's certificate) reaches the apiserver through the proxy
and cannot reach it any other way. ``connects()`` reads the proxy's access log: the CONNECT tunnels it opened.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.envtest.controlplane import terminate

REPO = Path(__file__).resolve().parents[2]


class ProxyUnavailable(Exception):
    """proxy.py is not installed (the `test` extra installs it)."""


def _require(module: str, package: str) -> None:
    """ProxyUnavailable unless the proxy's module imports (the `test` extra installs both)."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise ProxyUnavailable(f"{package} is not installed: pip install -e '.[test]'")


class _ProxyProcess:
    """One proxy child process: started in its own session with its output in `log`, ready when `ready()` says so,
    stopped with TERM, then KILL. The two proxies below differ only in their argv and readiness sign."""

    workdir: Path
    port: int
    _popen: subprocess.Popen | None

    @property
    def log(self) -> Path:
        raise NotImplementedError

    def _spawn(self, argv: list[str], ready: Callable[[], bool], timeout_s: float, *,
               env: dict[str, str] | None = None) -> None:
        name = argv[argv.index("-m") + 1]  # the module run: proxy, pproxy
        self.workdir.mkdir(parents=True, exist_ok=True)
        out = open(self.log, "ab")  # noqa: SIM115 - the child owns it
        self._popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       cwd=self.workdir, env=env, start_new_session=True)
        out.close()
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self._popen.poll() is not None:
                raise RuntimeError(f"{name} exited ({self._popen.returncode}): {self.log.read_text()[-2000:]}")
            if ready():
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{name} did not start in {timeout_s:g}s: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self._popen is not None and self._popen.poll() is None:
            terminate(self._popen, grace_s=10)
        self._popen = None


@dataclass
class ForwardProxy(_ProxyProcess):
    workdir: Path
    hosts: dict[str, str]
    basic_auth: str | None = None  # "user:password": 407 without them
    port: int = field(default=0, init=False)
    _popen: subprocess.Popen | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.workdir / "proxy.log"

    def start(self, timeout_s: float = 30.0) -> "ForwardProxy":
        _require("proxy", "proxy.py")
        port_file = self.workdir / "port"
        port_file.unlink(missing_ok=True)
        argv = [sys.executable, "-m", "proxy", "--hostname", "127.0.0.1", "--port", "0", "--port-file",
                str(port_file), "--num-acceptors", "1", "--num-workers", "2", "--log-level", "i",
                "--plugins", "tests.envtest.proxy_hosts.MapHosts"]
        if self.basic_auth:
            argv += ["--basic-auth", self.basic_auth]
        env = {**os.environ, "PYTHONPATH": str(REPO), "RBLNCTL_TEST_PROXY_HOSTS":
               ",".join(f"{k}={v}" for k, v in self.hosts.items())}
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            env.pop(name, None)

        def ready() -> bool:
            text = port_file.read_text().strip() if port_file.exists() else ""
            if text.isdigit():
                self.port = int(text)
            return bool(self.port)

        self._spawn(argv, ready, timeout_s, env=env)
        return self


@dataclass
class SocksProxy(_ProxyProcess):
    """A real SOCKS5 proxy with a user and password: pproxy (PyPI, the `test` extra) on a free loopback port.

    `--auth 0`: pproxy would otherwise let an address that authenticated once in without credentials for 30 days.
    Its `-v` log has one line per connection it made (`socks5 CLIENT -> TARGET`): ``tunnels()``.
    """

    workdir: Path
    user: str
    password: str
    port: int = field(default=0, init=False)
    _popen: subprocess.Popen | None = field(default=None, init=False)

    @property
    def log(self) -> Path:
        return self.workdir / "pproxy.log"

    def start(self, timeout_s: float = 30.0) -> "SocksProxy":
        _require("pproxy", "pproxy")
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        argv = [sys.executable, "-u", "-m", "pproxy", "-l",
                f"socks5://127.0.0.1:{self.port}#{self.user}:{self.password}", "--auth", "0", "-v"]
        self._spawn(argv, lambda: "Serving on" in self.log.read_text(errors="replace"), timeout_s)
        return self

    def tunnels(self, target: str) -> int:
        """Connections the proxy made to `target` (host:port)."""
        return self.log.read_text(errors="replace").count(f"-> {target}")
