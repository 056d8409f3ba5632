"""rblnctl's watches (rblnctl/kube/watch.py) on a real API server: bookmarks and expired resource versions.

What the real server does (measured on v1.36.2, with its watch cache): a watch gets a BOOKMARK (kind,
apiVersion and metadata.resourceVersion only) about once a minute and again 2 s before its timeout, but only
when the version moved past what it sent (a filtered watch, whose collection's other objects changed); a watch
from a resourceVersion older than the cache's window gets an ERROR event carrying a 410 Status ("too old
resource version"), not an HTTP 410. Compacting etcd alone (etcdctl compact) changes neither: the watch cache
keeps serving what it holds, and paged lists continue from its snapshots.
"""

from __future__ import annotations

import importlib
import threading
import time

from rblnctl.kube import CLUSTER_POLICIES, NODES, KubeOptions, connect
from tests.fakes import objects as o

watch_mod = importlib.import_module("rblnctl.kube.watch")  # the module (rblnctl.kube.watch is its function)


def kube_of(real):
    return connect(KubeOptions(kubeconfig=str(real.kubeconfig), request_timeout_s=30))


def test_a_watch_from_an_expired_version_lists_again(real):
    """A custom resource's watch cache starts when its CRD does: a version from before that is too old."""
    real.api.seed(o.cluster_policy())
    kube = kube_of(real)
    events = watch_mod.watch(kube, CLUSTER_POLICIES, resource_version="5", timeout_s=20)
    first = next(events)
    assert first.type == watch_mod.SYNC  # the stream said 410 (too old): rblnctl listed again
    assert [ob["metadata"]["name"] for ob in first.objects] == ["rbln-cluster-policy"]
    real.api.patch("RBLNClusterPolicy", "rbln-cluster-policy", {"spec": {"workloadType": "vm-passthrough"}})
    ev = next(events)
    assert ev.type == "MODIFIED" and ev.object["spec"]["workloadType"] == "vm-passthrough"
    events.close()


def test_a_watch_resumes_from_the_servers_bookmark(real, monkeypatch):
    """A filtered watch (set-mode's of one node) sees none of the other nodes' changes; the server's bookmark
    (2 s before the stream's timeout) carries the version they reached, and the next stream starts there."""
    monkeypatch.setattr(watch_mod, "WATCH_STREAM_S", 10)
    real.api.seed(o.npu_node("w1"), o.npu_node("w2"))
    kube = kube_of(real)
    stop = threading.Event()

    def tick() -> None:  # another node changes: the nodes' version moves past w1's, unseen by the watch
        i = 0
        while not stop.wait(0.5):
            real.api.patch("Node", "w2", {"metadata": {"labels": {"i": str(i)}}})
            i += 1

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    since = real.audit.mark()
    started = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    seen = []
    try:
        for ev in watch_mod.watch(kube, NODES, field_selector="metadata.name=w1", timeout_s=14):
            seen.append(ev.type)
    finally:
        stop.set()
        ticker.join()
    assert seen == [watch_mod.SYNC]  # bookmarks move the version on; they are not yielded
    watches = [e.uri for e in real.audit.events(since, user_agent="rblnctl/")
               if e.resource == "nodes" and "watch=true" in e.uri and e.received >= started]
    versions = [int(u.split("resourceVersion=")[1].split("&")[0]) for u in watches]
    assert len(versions) == 2, watches
    w1 = int(real.api.get("Node", "w1")["metadata"]["resourceVersion"])
    # The second stream started from the bookmark's version: past w1's and past where the first one started.
    assert versions[1] > versions[0] >= w1, (versions, w1)
