"""The knobs a test turns on a FakeApiServer, in one object every component reads.

``FakeApiServer`` exposes each field as a plain attribute (``fake.deletion_delay_s = 0.5``); the
components (store, eviction, watch, pods...) read them here, so a change takes effect at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

FAKE_USER = "fake-user"
FAKE_TOKEN = "fake-token"
#: Per-pod graceful deletion delay (seconds, as a string) overriding the server-wide one.
DELETION_DELAY_ANNOTATION = "fake.rblnctl.io/deletion-delay-s"
#: On a VirtualMachine: the node its simulated VirtualMachineInstance runs on.
VM_NODE_ANNOTATION = "fake.rblnctl.io/node"


@dataclass
class Settings:
    deletion_delay_s: float = 0.0
    require_token: bool = False
    token: str = FAKE_TOKEN
    user: str = FAKE_USER
    auto_namespaces: bool = True
    #: ``hook(pod, eviction_body)`` -> None to go on, or (status, message) to refuse the eviction.
    eviction_hook: Callable[[dict, dict], tuple[int, str] | None] | None = None
    #: Answer evictions of virt-launcher pods as KubeVirt's pod eviction webhook does (eviction.py).
    kubevirt_eviction_webhook: bool = True
    #: ``kubelet(pod)`` for every pod that appears on, or is bound to, a node (after commit, no lock).
    kubelet: Callable[[dict], None] | None = None
    #: Seconds between BOOKMARK events on a watch that asked for them (kube-apiserver: one minute).
    bookmark_interval_s: float = 60.0
    version_info: dict[str, str] = field(default_factory=dict)
