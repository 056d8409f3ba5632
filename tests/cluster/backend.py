"""One scenario, two API servers: the project's fake and a real kube-apiserver, behind one interface.

A ``Backend`` is what a scenario needs from a cluster, whichever serves it:

* ``api``: the harness's own admin client (tests/cluster/client.py) to seed objects and read them back;
* ``rblnctl(*args)``: the CLI, in-process, against this cluster (``--kubeconfig`` of the admin, or of a user);
* ``mark()`` / ``writes()`` / ``reads(resource)``: what rblnctl (User-Agent ``rblnctl/``) wrote, or read of a
  resource (get, list, watch), since the mark, as the server saw it: the fake's request log, the real server's
  audit log;
* ``lose_reply(method, path)``: the next matching rblnctl request is applied and its reply never arrives:
  the fake's fault injection, a TLS proxy in front of the real server (tests/envtest/proxy.py);
* ``user_kubeconfig(roles)``: a kubeconfig whose user holds exactly these Roles/ClusterRoles: the fake's
  enforce_rbac, a ServiceAccount bound to them with a TokenRequest token on the real server;
* ``kubelet(nodes)``: a SimKubelet for these nodes (pods Running/Ready, graceful deletions confirmed);
* ``operator(release=...)``: the simulated RBLN NPU operator (tests/fakes/operator.py), acting over HTTP;
* ``host_kubelet(default=ROOT)``: runs rblnctl's host pods on simulated host trees, serves their logs as a kubelet;
* ``replicaset(ns, name, node=...)``: a ReplicaSet's replacements, bound to a node (tests/cluster/replicaset.py);
* every simulation a backend started is stopped by ``close()`` (after each test).

``FakeBackend`` and ``RealBackend`` implement it; the ``backend`` fixture (tests/envtest/fixtures.py) gives
each scenario both, the real one marked ``envtest``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from tests.cluster.client import Api, ApiFailure
from tests.cluster.kubelet import SimKubelet

RBLNCTL_AGENT = "rblnctl/"
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_REVIEWS = ("selfsubjectaccessreviews", "selfsubjectrulesreviews", "selfsubjectreviews")


@dataclass(frozen=True)
class Read:
    """A read request as the server saw it: verb (get, list or watch), path and query (each name's values)."""

    verb: str
    path: str
    query: dict[str, list[str]]


@dataclass(frozen=True)
class Write:
    """A write request as the server saw it: verb (create/update/patch/delete), path, dryRun=All or not, and the code
    the server answered (also when that answer was lost on the way: the write was applied)."""

    verb: str
    path: str
    dry_run: bool
    code: int = 0


def kubeconfig_secrets(path: Path) -> list[str]:
    """The secrets a kubeconfig holds: its users' tokens, passwords and inline keys, its proxies' passwords."""
    import yaml
    from urllib.parse import unquote, urlsplit

    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return []
    found = []
    for entry in doc.get("users") or []:
        user = (entry or {}).get("user") or {}
        found += [str(user[k]) for k in ("token", "password", "client-key-data") if user.get(k)]
    for entry in doc.get("clusters") or []:
        proxy = ((entry or {}).get("cluster") or {}).get("proxy-url")
        password = urlsplit(str(proxy)).password if proxy else None
        if password:
            found.append(unquote(password))
    return [s for s in found if len(s) >= 6]  # a secret of a few characters could match any text


def harness_client(cluster: Any) -> tuple[Api, Any]:
    """The harness's client for `cluster` (a FakeApiServer, a Backend or an Api) and the FakeApiServer behind it (None
    on a real server): a simulation acts through the first and, on the fake, reacts through the second's synchronous
    hooks (on_change, kubelet), which run before the reply of the write that caused them."""
    if isinstance(cluster, Api):
        return cluster, None
    fake = getattr(cluster, "fake", None)
    if fake is not None:  # a FakeBackend
        return cluster.api, fake
    if hasattr(cluster, "on_change") and hasattr(cluster, "admin_token"):  # a FakeApiServer
        return Api(cluster.url, token=cluster.admin_token), cluster
    return cluster.api, None  # a RealBackend


class Backend:
    name: str
    api: Api
    kubeconfig: Path
    workdir: Path

    def __init__(self) -> None:
        self._kubelets: list[Any] = []  # every simulation started here (kubelets, operators), stopped by close()
        self._users = itertools.count(1)

    # ---- the CLI ---------------------------------------------------------------------------------

    def rblnctl(self, *args: str, kubeconfig: Path | None = None, input: str | None = None) -> Any:
        from rblnctl.cli.app import app

        kc = Path(kubeconfig or self.cli_kubeconfig)
        argv = ["--kubeconfig", str(kc), *[str(a) for a in args]]
        result = CliRunner().invoke(app, argv, input=input, catch_exceptions=False)
        # No scenario's output, -o json and -v=8 included, ever holds a secret of the kubeconfig (docs/security.md).
        for secret in kubeconfig_secrets(kc):
            assert secret not in result.stdout + result.stderr, f"rblnctl {' '.join(args)} printed a kubeconfig secret"
        return result

    @property
    def cli_kubeconfig(self) -> Path:
        return self.kubeconfig

    # ---- the simulated node side -----------------------------------------------------------------

    def kubelet(self, nodes: Iterable[str], **kw: Any) -> SimKubelet:
        k = SimKubelet(self.api, nodes, **kw).start()
        self._kubelets.append(k)
        return k

    def replicaset(self, namespace: str, name: str, *, node: str, template: dict) -> Any:
        """Keep the ReplicaSet's pods at spec.replicas, replacements bound to `node` (tests/cluster/replicaset.py)."""
        from tests.cluster.replicaset import ReplicaSetSim

        rs = ReplicaSetSim(self.api, namespace, name, node=node, template=template)
        self._kubelets.append(rs)
        return rs.start()

    def host_kubelet(self, **kw: Any) -> Any:
        """The kubelet of rblnctl's host pods (tests/fakes/hostkubelet.py), started; ``kw`` as HostKubelet takes."""
        from tests.fakes.hostkubelet import HostKubelet

        k = HostKubelet(self, **kw)
        self._kubelets.append(k)
        return k.start()

    def operator(self, **kw: Any) -> Any:
        """The simulated operator (tests/fakes/operator.py), started; ``kw`` as SimulatedOperator takes them."""
        from tests.fakes.operator import SimulatedOperator

        op = SimulatedOperator(self, **kw)
        self._kubelets.append(op)
        return op.start()

    def close(self) -> None:
        for k in reversed(self._kubelets):
            k.stop()
        self._kubelets.clear()

    # ---- what rblnctl did ------------------------------------------------------------------------

    def mark(self) -> None:
        raise NotImplementedError

    def writes(self) -> list[Write]:
        raise NotImplementedError

    def reads(self, resource: str) -> list[Read]:
        """rblnctl's reads of `resource` (``pods``: not its subresources) since the mark, in the order they came."""
        raise NotImplementedError

    def lose_reply(self, method: str, path: str, *, times: int = 1) -> None:
        raise NotImplementedError

    def user_kubeconfig(self, roles: list[dict], *, namespace: str | None = None) -> Path:
        raise NotImplementedError


class FakeBackend(Backend):
    name = "fake"

    def __init__(self, fake: Any, workdir: Path) -> None:
        super().__init__()
        self.fake = fake
        self.workdir = workdir
        # As on a real server, a pod deleted on a node stays Terminating until its kubelet confirms.
        fake.deletion_delay_s = float("inf")
        self.kubeconfig = fake.write_kubeconfig(workdir / "kubeconfig")
        self.api = Api(fake.url, token=fake.admin_token)
        self._mark = 0

    def mark(self) -> None:
        self._mark = len(self.fake.requests)

    def writes(self) -> list[Write]:
        out = []
        for r in list(self.fake.requests)[self._mark:]:
            if not r.is_write or not (r.headers.get("user-agent") or "").startswith(RBLNCTL_AGENT):
                continue
            if r.method == "POST" and r.path.rsplit("/", 1)[-1] in _REVIEWS:
                continue
            out.append(Write(_VERBS[r.method], r.path, r.dry_run, r.status))
        return out

    def reads(self, resource: str) -> list[Read]:
        out = []
        for r in list(self.fake.requests)[self._mark:]:
            if r.method != "GET" or not (r.headers.get("user-agent") or "").startswith(RBLNCTL_AGENT):
                continue
            segs = r.path.strip("/").split("/")
            segs = segs[2:] if segs[0] == "api" else segs[3:]  # /api/v1/..., /apis/GROUP/VERSION/...
            if len(segs) >= 3 and segs[0] == "namespaces":
                segs = segs[2:]
            if not segs or segs[0] != resource or len(segs) > 2:
                continue
            verb = "watch" if r.query.get("watch") == ["true"] else "get" if len(segs) == 2 else "list"
            out.append(Read(verb, r.path, dict(r.query)))
        return out

    def lose_reply(self, method: str, path: str, *, times: int = 1) -> None:
        self.fake.inject_fault(method=method, path=path, lose_reply=True, times=times, client=RBLNCTL_AGENT)

    def user_kubeconfig(self, roles: list[dict], *, namespace: str | None = None) -> Path:
        self.fake.enforce_rbac(roles)  # the fake's one user now holds exactly these roles
        return self.fake.write_kubeconfig(self.workdir / f"user-{next(self._users)}.kubeconfig",
                                          namespace=namespace or "default")


@dataclass
class RealBackend(Backend):
    """A real kube-apiserver (tests/envtest/controlplane.py): see the module doc."""

    control_plane: Any
    workdir: Path
    name: str = "real"
    proxy: Any = None
    _mark: int = 0
    _via_proxy: bool = False
    _baseline: dict[str, set[tuple[str, str]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        Backend.__init__(self)
        cp = self.control_plane
        self.kubeconfig = cp.kubeconfig
        self.api = Api(cp.url, token=cp.admin_token, ca=str(cp.ca))
        from tests.envtest.audit import AuditLog

        self.audit = AuditLog(cp.audit_log)

    @property
    def cli_kubeconfig(self) -> Path:
        if not self._via_proxy:
            return self.kubeconfig
        return self.control_plane.write_kubeconfig(self.workdir / "proxied.kubeconfig", user="admin",
                                                   token=self.control_plane.admin_token, server=self._proxy().url)

    def _proxy(self) -> Any:
        if self.proxy is None:
            from tests.envtest.proxy import FaultProxy

            certs = self.control_plane.workdir / "certs"
            self.proxy = FaultProxy(self.control_plane.url, self.control_plane.ca, certs / "apiserver.crt",
                                    certs / "apiserver.key").start()
        return self.proxy

    def mark(self) -> None:
        self._mark = self.audit.mark()

    def writes(self) -> list[Write]:
        return [Write(e.verb, e.uri.split("?")[0], e.dry_run, e.code) for e in self.audit.writes(self._mark)]

    def reads(self, resource: str) -> list[Read]:
        from urllib.parse import parse_qs, urlsplit

        # a watch is logged when its stream ends (ResponseComplete) and, already, when it starts (ResponseStarted)
        events = [e for e in self.audit.events(self._mark, user_agent=RBLNCTL_AGENT)
                  if e.verb in ("get", "list")] + [
            e for e in self.audit.events(self._mark, user_agent=RBLNCTL_AGENT, stage="ResponseStarted")
            if e.verb == "watch"]
        return [Read(e.verb, urlsplit(e.uri).path, parse_qs(urlsplit(e.uri).query))
                for e in sorted(events, key=lambda e: e.received) if e.resource == resource and not e.subresource]

    def lose_reply(self, method: str, path: str, *, times: int = 1) -> None:
        self._proxy().add_rule("lose_reply", method=method, path=path, times=times)
        self._via_proxy = True

    def user_kubeconfig(self, roles: list[dict], *, namespace: str | None = None) -> Path:
        """A ServiceAccount bound to exactly `roles` (each ClusterRole by a ClusterRoleBinding, each Role by a
        RoleBinding in its namespace), authenticated by a TokenRequest token."""
        n = next(self._users)
        sa_ns, sa = "default", f"rblnctl-user-{n}"
        self.api.create({"kind": "ServiceAccount", "metadata": {"name": sa, "namespace": sa_ns}})
        subject = [{"kind": "ServiceAccount", "name": sa, "namespace": sa_ns}]
        for r in roles:
            r = {k: v for k, v in r.items() if k != "status"}
            name = f"{r['metadata']['name']}-{n}"
            md = {**r["metadata"], "name": name}
            md.pop("resourceVersion", None)
            self.api.create({**r, "metadata": md})
            if r["kind"] == "ClusterRole":
                self.api.create({"kind": "ClusterRoleBinding", "metadata": {"name": name}, "subjects": subject,
                                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                             "name": name}})
            else:
                self.api.create({"kind": "RoleBinding", "metadata": {"name": name, "namespace": md["namespace"]},
                                 "subjects": subject, "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                                                  "kind": "Role", "name": name}})
        tr = self.api.request("POST", f"/api/v1/namespaces/{sa_ns}/serviceaccounts/{sa}/token",
                              {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                               "spec": {"expirationSeconds": 3600}})
        return self.control_plane.write_kubeconfig(self.workdir / f"user-{n}.kubeconfig", user=sa,
                                                   token=tr["status"]["token"], namespace=namespace)

    # ---- isolation -------------------------------------------------------------------------------

    # What a test may leave behind, wiped after each one: every object of these kinds that was not there when
    # the session's first test began (bootstrap RBAC, kube-system, the default ServiceAccount...).
    SWEPT = ("Pod", "Lease", "PodDisruptionBudget", "ReplicaSet", "Deployment", "DaemonSet", "StatefulSet",
             "ConfigMap", "Event", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding",
             "ResourceQuota", "VirtualMachine", "VirtualMachineInstance", "KubeVirt", "NodeFeature",
             "NodeFeatureRule", "RBLNClusterPolicy", "RBLNDriver", "DeviceClass", "ResourceSlice", "ResourceClaim",
             "ResourceClaimTemplate", "Node")

    def snapshot(self) -> None:
        """Remember what exists now: sweep() leaves it alone."""
        self._baseline = {k: self._present(k) for k in self.SWEPT}

    def _present(self, kind: str) -> set[tuple[str, str]]:
        try:
            return {((o["metadata"].get("namespace") or ""), o["metadata"]["name"]) for o in self.api.list(kind)}
        except ApiFailure as e:
            if e.status == 404:  # its CRD is not installed (here)
                return set()
            raise

    def sweep(self) -> None:
        """Delete what tests created (pods at once, without a kubelet), so the next test starts clean."""
        self.close()
        if self.proxy is not None:
            self.proxy.clear()
        self._via_proxy = False
        for kind in self.SWEPT:
            keep = self._baseline.get(kind, set())
            gone = self._present(kind) - keep
            if len(gone) > 20 and not keep and not self.api.kinds[kind].namespaced:
                self.api.request("DELETE", self.api.kinds[kind].path())  # one deletecollection for many
                continue
            for ns, name in gone:
                if ns in ("kube-system", "kube-public", "kube-node-lease") and kind in ("Event", "Lease"):
                    continue
                self.api.delete(kind, name, ns or None, grace_s=0 if kind == "Pod" else None)
        # Pods a namespace still holds Terminating (finalizers) would leak into the next test's lists.
        for p in self.api.list("Pod"):
            if (p["metadata"].get("namespace"), p["metadata"]["name"]) not in self._baseline.get("Pod", set()):
                if p["metadata"].get("finalizers"):
                    self.api.patch("Pod", p["metadata"]["name"], {"metadata": {"finalizers": None}},
                                   p["metadata"]["namespace"])
                self.api.delete("Pod", p["metadata"]["name"], p["metadata"]["namespace"], grace_s=0)

    def stop(self) -> None:
        self.close()
        if self.proxy is not None:
            self.proxy.stop()
            self.proxy = None
