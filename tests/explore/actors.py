"""Other actors between rblnctl's steps (issue 37): what a VM's owner, a second admin, the node's operator or the
scheduler does while a multi-step command is half-way.

An actor acts once, at one POINT of the command's uninterrupted write log (tests/explore/engine.py): `before-01`
(after every read that decided the first write, before that write reaches the server: the fake's `on_request`)
or `after-k` (write k handled and committed, its reply not yet sent: the fake's `on_handled`), so every gap between
two of rblnctl's steps is one point. What an actor does goes through the API as its own client would do it (virtctl,
kubectl, a second `rblnctl`), on the same fake, from the thread serving rblnctl's request (rblnctl waits meanwhile).

| actor | what it does (a refusal is an actor that did nothing) | in worlds with |
|---|---|---|
| `owner-start`, `owner-stop`, `owner-restart` | `virtctl start|stop|restart` of the VM (virt-api) | a VM |
| `owner-edit` | `kubectl patch` of the VM's memory request (a change virt-controller cannot apply live) | a VM |
| `owner-recreate` | `kubectl delete` the VM, then `kubectl create` it again from the manifest it had | a VM |
| `second-same` | a second `rblnctl` running the same command (with `--yes`) | every world |
| `second-opposite` | a second `rblnctl` running the opposite command (the world's `opposite`) | worlds with one |
| `relabel` | the operator (a person) `kubectl label --overwrite`s the node back to the mode it had | a node |
| `pod-arrives` | a pod holding an NPU is bound to the node (a ReplicaSet's, as the scheduler places one) | a node |
"""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.fakes import objects as o
from tests.fakes.apiserver import FakeApiServer

OWNER_AGENT = "explore-actor/1.0"  # not rblnctl/: the owner's requests are none of the command's
EDITED_MEMORY = "6Gi"  # what `owner-edit` sets the VM's memory request to


@dataclass
class Act:
    """What an actor did: `effective` when the cluster took it (a refusal changes nothing), the objects it replaced
    (their API paths and new uids), and what it said (for a failing case's message)."""

    effective: bool
    replaced: dict[str, str] = field(default_factory=dict)  # API path -> the new object's uid
    said: str = ""


@dataclass
class Scene:
    """What an actor acts on: the server, the world's target objects and the manifests they started from."""

    server: FakeApiServer
    vm: tuple[str, str] | None  # (namespace, name) of the VM the command works on
    node: str | None  # the node the command works on
    original: dict[str, dict]  # API path -> the object as the world built it
    argv: tuple[str, ...]
    opposite: tuple[str, ...] | None
    before_mode: str | None = None  # the node's workload mode when the world was built


def _http(server: FakeApiServer, method: str, path: str, body: Any = None,
          content_type: str = "application/json") -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(server.url + path, data=data, method=method,
                                 headers={"User-Agent": OWNER_AGENT, "Content-Type": content_type,
                                          "Accept": "*/*"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw.decode(errors="replace")


def vm_path(ns: str, name: str) -> str:
    return f"/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachines/{name}"


def _said(code: int, out: Any) -> str:
    return f"{code} {out.get('message') if isinstance(out, dict) else out}"


def _virtctl(action: str) -> Callable[[Scene], Act]:
    def act(scene: Scene) -> Act:
        assert scene.vm is not None
        ns, name = scene.vm
        code, out = _http(scene.server, "PUT",
                          f"/apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachines/{name}/{action}", {})
        return Act(effective=code < 300, said=f"virtctl {action}: {_said(code, out)}")
    return act


def _edit(scene: Scene) -> Act:
    assert scene.vm is not None
    patch = {"spec": {"template": {"spec": {"domain": {"resources": {"requests": {"memory": EDITED_MEMORY}}}}}}}
    code, out = _http(scene.server, "PATCH", vm_path(*scene.vm), patch, "application/merge-patch+json")
    return Act(effective=code < 300, said=f"kubectl patch (memory {EDITED_MEMORY}): {_said(code, out)}")


def _recreate(scene: Scene) -> Act:
    assert scene.vm is not None
    path = vm_path(*scene.vm)
    code, out = _http(scene.server, "DELETE", path)
    if code >= 300:
        return Act(effective=False, said=f"kubectl delete: {_said(code, out)}")
    manifest = fresh_manifest(scene.original[path])
    code, out = _http(scene.server, "POST", path.rsplit("/", 1)[0], manifest)
    uid = (out or {}).get("metadata", {}).get("uid", "") if isinstance(out, dict) else ""
    return Act(effective=True, replaced={path: uid}, said=f"kubectl delete, then create: {_said(code, out)}")


def fresh_manifest(obj: dict) -> dict:
    """The object as its owner's manifest has it: no identity, no status."""
    out = copy.deepcopy(obj)
    out.pop("status", None)
    md = out.get("metadata") or {}
    for k in ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "deletionTimestamp"):
        md.pop(k, None)
    return out


def _second(which: str) -> Callable[[Scene], Act]:
    def act(scene: Scene) -> Act:
        from tests.helpers import cli

        argv = scene.argv if which == "same" else scene.opposite
        assert argv is not None
        r = cli(*argv, server=scene.server.url)
        return Act(effective=r.exit_code == 0,
                   said=f"rblnctl {' '.join(argv)}: exit {r.exit_code}\n{r.stdout}{r.stderr}")
    return act


def _relabel(scene: Scene) -> Act:
    assert scene.node is not None and scene.before_mode is not None
    patch = {"metadata": {"labels": {o.WORKLOAD_LABEL: scene.before_mode}}}
    code, out = _http(scene.server, "PATCH", f"/api/v1/nodes/{scene.node}", patch, "application/merge-patch+json")
    return Act(effective=code < 300, said=f"kubectl label --overwrite {o.WORKLOAD_LABEL}={scene.before_mode}: "
                                          f"{_said(code, out)}")


ARRIVED = "arrived"  # the name of the pod `pod-arrives` binds


def _pod_arrives(scene: Scene) -> Act:
    assert scene.node is not None
    pod = o.pod("default", ARRIVED, node=scene.node, owner_kind="ReplicaSet", owner_name="web", requests=o.ONE_NPU)
    code, out = _http(scene.server, "POST", "/api/v1/namespaces/default/pods", fresh_manifest(pod))
    return Act(effective=code < 300, said=f"a pod bound to {scene.node}: {_said(code, out)}")


@dataclass(frozen=True)
class Actor:
    name: str
    act: Callable[[Scene], Act]
    needs: str  # "vm", "node", "opposite" or "" (every world)


ACTORS = (
    Actor("owner-start", _virtctl("start"), "vm"),
    Actor("owner-stop", _virtctl("stop"), "vm"),
    Actor("owner-restart", _virtctl("restart"), "vm"),
    Actor("owner-edit", _edit, "vm"),
    Actor("owner-recreate", _recreate, "vm"),
    Actor("second-same", _second("same"), ""),
    Actor("second-opposite", _second("opposite"), "opposite"),
    Actor("relabel", _relabel, "node"),
    Actor("pod-arrives", _pod_arrives, "node"),
)
