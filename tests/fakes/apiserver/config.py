"""The knobs a test turns on a FakeApiServer, in one object every component reads.

``FakeApiServer`` exposes each field as a plain attribute (``fake.deletion_delay_s = 0.5``); the
components (store, eviction, watch, pods...) read them here, so a change takes effect at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

FAKE_USER = "fake-user"
FAKE_TOKEN = "fake-token"
#: The cluster admin (system:masters on a real server): requests bearing this token are never refused by
#: ``forbid()`` or ``enforce_rbac()``. The test harness's own client (tests/cluster/client.py) uses it, as it
#: uses the admin's token on a real kube-apiserver, so a test that restricts rblnctl does not restrict the
#: simulated operator or kubelets.
ADMIN_TOKEN = "fake-admin-token"
#: The User-Agent of the test harness's own client (tests/cluster/client.py: the simulated operator and
#: kubelets, seeding). Its requests are kept out of what tests assert about the clients under test: they are
#: recorded in ``harness_requests``, not ``requests``; they run no ``on_request`` callback; an injected fault
#: never takes one unless its ``client`` names this agent.
HARNESS_USER_AGENT = "rblnctl-tests/harness"
#: Per-pod graceful deletion delay (seconds, as a string) overriding the server-wide one.
DELETION_DELAY_ANNOTATION = "fake.rblnctl.io/deletion-delay-s"
#: On a VirtualMachine: the node its simulated VirtualMachineInstance runs on.
VM_NODE_ANNOTATION = "fake.rblnctl.io/node"


@dataclass
class Settings:
    #: Seconds a gracefully deleted pod on a node stays Terminating before the fake removes it itself; ``inf``:
    #: until a kubelet confirms (a DELETE with ``gracePeriodSeconds: 0``), as on a real server.
    deletion_delay_s: float = 0.0
    require_token: bool = False
    token: str = FAKE_TOKEN
    user: str = FAKE_USER
    auto_namespaces: bool = True
    #: ``hook(pod, eviction_body)`` -> None to go on, or (status, message) to refuse the eviction.
    eviction_hook: Callable[[dict, dict], tuple[int, str] | None] | None = None
    #: Answer evictions of virt-launcher pods as KubeVirt's pod eviction webhook does (eviction.py).
    kubevirt_eviction_webhook: bool = True
    #: False: kube-aggregator cannot reach virt-api (aggregator.py): its APIService is not Available and every
    #: request under subresources.kubevirt.io is the proxy's 503 ``service unavailable``.
    virt_api_available: bool = True
    #: ``kubelet(pod)`` for every pod that appears on, or is bound to, a node (after commit, no lock).
    kubelet: Callable[[dict], None] | None = None
    #: Seconds between BOOKMARK events on a watch that asked for them (kube-apiserver: one minute).
    bookmark_interval_s: float = 60.0
    version_info: dict[str, str] = field(default_factory=dict)
