"""The node lock's Lease writes under lost replies, 5xx answers and a forbidden delete: settled by reading back."""

from __future__ import annotations

import pytest

from rblnctl.errors import OutcomeUnknown
from rblnctl.node.lock import NodeLock, lease_name
from rblnctl.constants import OPERATOR_NAMESPACE as NS

LEASES = r"/apis/coordination\.k8s\.io/v1/namespaces/rbln-system/leases"


def lock(kube, identity="rblnctl@here pid 1: set-mode n1 vm"):
    return NodeLock(kube=kube, node="n1", namespace=NS, identity=identity, duration_s=60)


def holder(apiserver):
    lease = apiserver.get("Lease", lease_name("n1"), NS)
    return None if lease is None else lease["spec"].get("holderIdentity")


def test_a_create_answered_504_but_not_applied_is_sent_again(apiserver, kube):
    """Before: the read-back found no Lease and the run failed with "leases ... not found"."""
    apiserver.inject_fault(method="POST", path=LEASES + "$", status=504, times=1)
    mine = lock(kube)
    assert mine.acquire() is None
    assert holder(apiserver) == mine.identity
    creates = apiserver.requests_matching("POST", LEASES + "$")
    assert [r.status for r in creates] == [504, 201]


def test_a_create_whose_reply_is_lost_is_found_applied_and_not_sent_again(apiserver, kube):
    apiserver.inject_fault(method="POST", path=LEASES + "$", lose_reply=True, times=1)
    mine = lock(kube)
    assert mine.acquire() is None
    assert holder(apiserver) == mine.identity
    assert len(apiserver.requests_matching("POST", LEASES + "$")) == 1
    mine.release()
    assert apiserver.get("Lease", lease_name("n1"), NS) is None


def test_a_delete_whose_reply_is_lost_is_settled_and_the_next_run_is_not_refused(apiserver, kube):
    first = lock(kube)
    first.acquire()
    apiserver.inject_fault(method="DELETE", path=LEASES + "/", lose_reply=True, times=1)
    first.release()
    assert apiserver.get("Lease", lease_name("n1"), NS) is None
    assert lock(kube, identity="rblnctl@here pid 2: set-mode n1 vm").check() == []


def test_a_delete_answered_5xx_is_sent_again(apiserver, kube):
    """Before: logged and left alone, so the next run was refused by this run's dead lock for 60 s."""
    first = lock(kube)
    first.acquire()
    apiserver.inject_fault(method="DELETE", path=LEASES + "/", status=503, times=2)
    first.release()
    assert apiserver.get("Lease", lease_name("n1"), NS) is None
    assert [r.status for r in apiserver.requests_matching("DELETE", LEASES + "/")] == [503, 503, 200]


def test_a_forbidden_delete_releases_the_lock_by_clearing_its_holder(apiserver, kube):
    """RBAC that lets a run create and patch its Lease but not delete it: the lock is still given back."""
    first = lock(kube)
    first.acquire()
    apiserver.forbid("delete", "leases.coordination.k8s.io", NS)
    first.release()
    assert holder(apiserver) in (None, "")
    second = lock(kube, identity="rblnctl@here pid 2: set-mode n1 vm")
    assert second.check() == []
    assert second.acquire() is None and holder(apiserver) == second.identity


def test_a_lost_create_that_cannot_be_read_back_is_outcome_unknown(apiserver, kube):
    apiserver.inject_fault(method="POST", path=LEASES + "$", lose_reply=True, times=1)

    def after_create(req):  # the Lease can be read before the create, not after it
        if req.method == "POST" and "leases" in req.path:
            apiserver.inject_fault(method="GET", path=LEASES + "/", status=503, times=10)

    apiserver.on_request(after_create)
    kube.read_retries = 0
    with pytest.raises(OutcomeUnknown, match="reading Lease rbln-system/rblnctl-node-n1 back"):
        lock(kube).acquire()


def _ctrl_c():
    import signal
    import threading

    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)


def test_an_acquire_interrupted_after_its_create_landed_gives_the_lock_back(apiserver, kube):
    """Issue 28 (the crash-point explorer): SIGTERM or Ctrl-C while the Lease's create was answered left a Lease naming
    the dead run, and the `resume:` it printed was refused for a minute ("locked by ... wait for it to finish")."""
    apiserver.inject_fault(method="POST", path=LEASES + "$", lose_reply=True, then=_ctrl_c)
    mine = lock(kube)
    with pytest.raises(KeyboardInterrupt):
        mine.acquire()
    assert holder(apiserver) == mine.identity  # it landed, and the run never heard
    mine.release()
    assert apiserver.get("Lease", lease_name("n1"), NS) is None
    other = lock(kube, identity="rblnctl@there pid 2: set-mode n1 vm")
    assert other.check() == [] and other.acquire() is None


def test_an_interrupted_acquire_leaves_anyone_elses_lease_alone(apiserver, kube):
    apiserver.inject_fault(method="POST", path=LEASES + "$", drop=True, then=_ctrl_c)  # never reached the server
    mine = lock(kube)
    with pytest.raises(KeyboardInterrupt):
        mine.acquire()
    other = lock(kube, identity="rblnctl@there pid 2: set-mode n1 vm")
    assert other.acquire() is None
    mine.release()
    assert holder(apiserver) == other.identity


def test_ctrl_c_while_the_lock_is_given_back_still_gives_it_back(apiserver, kube):
    mine = lock(kube)
    mine.acquire()
    apiserver.inject_fault(method="DELETE", path=LEASES + "/", drop=True, then=_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        mine.release()
    assert apiserver.get("Lease", lease_name("n1"), NS) is None
