"""The harness's simulated kubelet (tests/cluster/kubelet.py) does the same on the fake and on a real kube-apiserver.

The scenarios rely on it: pods Running and Ready only through pods/status, graceful deletions ended by its
confirmation, node heartbeats; and on the annotations that steer one pod. Checked here on both servers, through
the harness's client only.
"""

from __future__ import annotations

from tests.cluster.kubelet import EXTERNAL, HOLD, NOT_READY
from tests.fakes import objects as o

NS = "team-a"


def bare_pod(name: str, node: str, **annotations: str) -> dict:
    p = o.pod(NS, name, node=node, annotations=annotations or None)
    p.pop("status")  # as a controller creates it: the server starts it Pending
    return p


def conditions(pod: dict) -> dict[str, str]:
    return {c["type"]: c["status"] for c in (pod.get("status") or {}).get("conditions") or []}


def test_the_kubelet_runs_pods_confirms_deletions_and_beats(backend):
    api = backend.api
    api.seed(o.node("n1"), o.node("n2"))
    kubelet = backend.kubelet(["n1"], heartbeat_s=0.2)
    api.seed(bare_pod("web", "n1"), bare_pod("held", "n1", **{HOLD: "true"}),
             bare_pod("starting", "n1", **{NOT_READY: "true"}), bare_pod("operand", "n1", **{EXTERNAL: "true"}),
             bare_pod("elsewhere", "n2"))
    api.wait_for(lambda: (api.get("Pod", "web", NS).get("status") or {}).get("phase") == "Running",
                 message="the kubelet to start web")
    assert kubelet.wait_idle()
    web = api.get("Pod", "web", NS)
    assert conditions(web)["Ready"] == "True" and web["status"]["containerStatuses"][0]["state"]["running"]
    assert conditions(api.get("Pod", "starting", NS))["Ready"] == "False"
    for name in ("held", "operand", "elsewhere"):  # left Pending: steered away, or another node's
        assert (api.get("Pod", name, NS).get("status") or {}).get("phase") == "Pending"

    before = {c["type"]: c.get("lastHeartbeatTime") for c in api.get("Node", "n1")["status"]["conditions"]}
    api.wait_for(lambda: {c["type"]: c.get("lastHeartbeatTime") for c in api.get("Node", "n1")["status"][
        "conditions"]}["Ready"] != before["Ready"], message="a heartbeat")

    gone = api.delete("Pod", "web", NS)  # graceful: Terminating until the kubelet confirms
    assert gone["metadata"]["deletionTimestamp"]
    api.wait_for(lambda: api.get("Pod", "web", NS) is None, message="the kubelet to confirm the deletion")
    api.delete("Pod", "elsewhere", NS)  # no kubelet on n2: it stays Terminating
    assert kubelet.wait_idle() and api.get("Pod", "elsewhere", NS)["metadata"]["deletionTimestamp"]
    assert kubelet.errors == []
