"""HostPodRunner on the fake API server, whose kubelet runs each pod's rblnctl on a simulated host tree."""

from __future__ import annotations

import json
import threading

import pytest

from rblnctl.clock import SYSTEM_CLOCK
from rblnctl.errors import ClusterError, Forbidden, InvalidInput, Interrupted, NotFound
from rblnctl.hostpods.runner import HostPodRunner, PodState
from rblnctl.preflight.hosts import PREFLIGHT_LOCAL
from tests.fakes.clock import FakeClock
from tests.fakes.hostkubelet import HostKubelet
from tests.hostpods.conftest import add_nodes, failing_create
from tests.helpers import blocked_in, ctrl_c_pending_when
from rblnctl.constants import HOST_POD_LABEL as LABEL


def runner(kube, **kw) -> HostPodRunner:
    args = dict(kube=kube, command=PREFLIGHT_LOCAL, image="registry.local/rblnctl:test", namespace="rbln-system",
                clock=FakeClock()) | kw
    return HostPodRunner(**args)


def host_pods(apiserver) -> list[str]:
    return [p["metadata"]["name"] for p in apiserver.list("Pod") if LABEL in (p["metadata"].get("labels") or {})]


def count(apiserver, method: str, path: str) -> int:
    return len(apiserver.requests_matching(method, path))


def slow_pods_run(apiserver, kube, root, nodes: list[str], seconds: float, *, before=lambda: None, **kw):
    """Run on `nodes` with a kubelet whose pods each run `seconds` (its own time) before they end; every pod must
    complete. `before()` is called once the kubelet runs. Returns (the run, the kubelet)."""
    kubelet = HostKubelet(apiserver, default=root, finish_after_s=seconds).start()
    try:
        before()
        run = runner(kube, **kw).run(nodes)
    finally:
        kubelet.stop()
    assert kubelet.errors == [] and {o.state for o in run.outcomes} == {PodState.COMPLETED}
    return run, kubelet


def reads(apiserver) -> tuple[int, int]:
    """(LISTs, WATCHes) of the run's pods the fake served."""
    got = apiserver.requests_matching("GET", r"/namespaces/rbln-system/pods$")
    watches = sum(1 for r in got if r.query.get("watch") == ["true"])
    return len(got) - watches, watches


def test_healthy_run_reads_every_report_and_deletes_every_pod(apiserver, kube, kubelet):
    nodes = add_nodes(apiserver, 4)
    run = runner(kube).run(nodes)
    assert [o.node for o in run.outcomes] == nodes
    assert {o.state for o in run.outcomes} == {PodState.COMPLETED} and {o.exit_code for o in run.outcomes} == {0}
    report = json.loads(run.outcomes[2].log)
    assert report["target"] == "host" and report["summary"]["ok"] is True
    assert host_pods(apiserver) == [] and run.left_behind == ()
    assert [n for n, _ in kubelet.runs] == nodes  # one pod per node, each on its node
    assert all(argv[:4] == ["preflight", "--local", "--root", str(kubelet.default)] for _, argv in kubelet.runs)
    assert count(apiserver, "POST", r"/namespaces/rbln-system/pods$") == 4
    assert count(apiserver, "GET", r"/pods/[^/]+/log$") == 4
    # each log came from the node's kubelet, as kube-apiserver fetches it
    assert sorted(kubelet.endpoint.requests) == sorted(f"/containerLogs/rbln-system/{o.pod}/check"
                                                       for o in run.outcomes)
    assert count(apiserver, "DELETE", r"/pods/") == 4


def test_unschedulable_node_is_an_outcome_with_the_schedulers_message(apiserver, kube, kubelet):
    nodes = add_nodes(apiserver, 3)
    kubelet.unschedulable["n1"] = "0/3 nodes are available: 1 Insufficient memory."
    run = runner(kube).run(nodes)
    by = {o.node: o for o in run.outcomes}
    assert by["n1"].state == PodState.UNSCHEDULABLE and by["n1"].message.startswith("0/3 nodes are available")
    assert by["n0"].state == by["n2"].state == PodState.COMPLETED
    assert host_pods(apiserver) == [] and count(apiserver, "GET", r"/pods/[^/]+/log$") == 2


@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff"])
def test_image_pull_failure_is_an_outcome_at_once(apiserver, kube, kubelet, reason):
    nodes = add_nodes(apiserver, 2)
    kubelet.image_pull["n0"] = reason
    clock = FakeClock()
    run = runner(kube, clock=clock, timeout_s=600).run(nodes)
    o = run.outcomes[0]
    assert o.state == PodState.IMAGE_PULL and o.reason == reason
    assert clock.monotonic() - 1000.0 < 600  # reported when seen, not at the deadline
    assert host_pods(apiserver) == []


def test_kubelet_rejection_is_an_outcome(apiserver, kube, kubelet):
    nodes = add_nodes(apiserver, 1)
    kubelet.rejected["n0"] = ("OutOfcpu", "Node didn't have enough resource: cpu")
    [o] = runner(kube).run(nodes).outcomes
    assert (o.state, o.reason, o.message) == (PodState.REJECTED, "OutOfcpu", "Node didn't have enough resource: cpu")


def test_a_pod_that_never_ends_times_out_and_is_deleted(apiserver, kube, kubelet):
    """The deadline ends the watch (the system clock: a watch's stream lasts on the server's clock, which a FakeClock
    does not move); the nodes after it run then. One LIST for the run: the watch is reopened where it stopped."""
    nodes = add_nodes(apiserver, 3)
    kubelet.hang.add("n0")
    apiserver.clear_requests()
    run = runner(kube, clock=SYSTEM_CLOCK, timeout_s=1, max_parallel=1).run(nodes)
    o = run.outcomes[0]
    assert o.state == PodState.TIMED_OUT and "not finished after 1s (Running)" in o.message
    assert [o.state for o in run.outcomes[1:]] == [PodState.COMPLETED] * 2
    assert host_pods(apiserver) == []
    lists, watches = reads(apiserver)
    assert lists == 1 and watches >= 2


def test_a_pod_deleted_by_someone_else_is_an_outcome(apiserver, kube, kubelet):
    nodes = add_nodes(apiserver, 2)
    kubelet.hang.add("n0")
    r = runner(kube)
    r.on_started = lambda node, pod: apiserver.delete_now("Pod", pod, "rbln-system") if node == "n0" else None
    o = r.run(nodes).outcomes[0]
    assert o.state == PodState.VANISHED and "deleted before it finished" in o.message


def test_a_ctrl_c_that_lands_as_the_run_waits_for_its_pods_ends_it_at_once(apiserver, kube, kubelet):
    """The run read its watch stream on the main thread: a Ctrl-C that landed just before the read (SIGINT's handler
    pending, the read not interrupted) ran only at the next event or the deadline. It is read on a thread
    (watch_many), the main thread waiting in slices; the interrupted run deletes its pods as before."""
    nodes = add_nodes(apiserver, 1)
    kubelet.hang.update(nodes)  # the pod runs until the test ends: only the interrupt ends the wait
    main = threading.current_thread()
    with ctrl_c_pending_when(lambda: apiserver.open_watches == 1 and blocked_in(main, "next_event")):
        with pytest.raises(KeyboardInterrupt):
            runner(kube, clock=SYSTEM_CLOCK, timeout_s=120).run(nodes)
    assert host_pods(apiserver) == []


@pytest.mark.parametrize("signal", [KeyboardInterrupt(), Interrupted(15)], ids=["ctrl-c", "sigterm"])
def test_interrupt_mid_run_leaves_nothing_behind(apiserver, kube, kubelet, signal):
    nodes = add_nodes(apiserver, 6)
    kubelet.hang.update(nodes)  # every pod is still running when the signal comes
    started: list[str] = []

    def on_started(node: str, pod: str) -> None:
        started.append(pod)
        if len(started) == 3:
            raise signal

    with pytest.raises(KeyboardInterrupt):
        runner(kube, max_parallel=4, on_started=on_started).run(nodes)
    assert len(started) == 3 and host_pods(apiserver) == []
    assert {r.path.rsplit("/", 1)[1] for r in apiserver.requests_matching("DELETE", r"/pods/")} == set(started)
    assert apiserver.list("Pod") == []  # nothing else was made either


def test_an_api_failure_mid_run_raises_after_cleaning_up(apiserver, kube, kubelet):
    """The pods cannot be read, ever: tried again (a 5xx may pass) until the first pod's deadline, then raised."""
    nodes = add_nodes(apiserver, 3)
    kubelet.hang.update(nodes)
    kube.clock = clock = FakeClock()
    apiserver.inject_fault(method="GET", path=r"/namespaces/rbln-system/pods$", status=500, times=100000)
    with pytest.raises(ClusterError) as exc:
        runner(kube, clock=clock, timeout_s=30).run(nodes)
    assert exc.value.status == 500
    assert host_pods(apiserver) == []
    assert 30 <= clock.monotonic() - 1000.0 < 40  # waited (on the clock) until the deadline, not beyond


def test_a_failure_that_passes_is_tried_again_and_the_run_goes_on(apiserver, kube, kubelet):
    """5xx answers to the list, more than the client's own retries: the watch tries again; every pod is judged."""
    nodes = add_nodes(apiserver, 3)
    kube.clock = clock = FakeClock()
    apiserver.inject_fault(method="GET", path=r"/namespaces/rbln-system/pods$", status=503, times=8)
    run = runner(kube, clock=clock).run(nodes)
    assert {o.state for o in run.outcomes} == {PodState.COMPLETED} and host_pods(apiserver) == []
    assert clock.sleeps  # it did wait before trying again


def test_each_retry_of_the_pods_watch_is_told_to_on_retry(apiserver, kube, kubelet):
    """The pods' LIST fails twice past the client's own read retries (500s): on_retry hears of each failure the
    watch tries again, with the server's error, and the run goes on to every pod's outcome."""
    from rblnctl.kube.client import READ_RETRIES

    nodes = add_nodes(apiserver, 2)
    kube.clock = clock = FakeClock()
    apiserver.inject_fault(method="GET", path=r"/namespaces/rbln-system/pods$", watch=False, status=500,
                           message="etcdserver: leader changed", times=2 * (READ_RETRIES + 1))
    heard: list[ClusterError] = []
    run = runner(kube, clock=clock, on_retry=heard.append).run(nodes)
    assert {o.state for o in run.outcomes} == {PodState.COMPLETED} and host_pods(apiserver) == []
    assert [(e.status, "leader changed" in str(e)) for e in heard] == [(500, True), (500, True)]


@pytest.mark.parametrize("verb, path", [("POST", r"/namespaces/rbln-system/pods$"),
                                        ("DELETE", r"/namespaces/rbln-system/pods/[^/]+$")], ids=["create", "delete"])
def test_a_create_or_delete_answered_503_is_sent_again_and_told_to_on_retry(apiserver, kube, kubelet, verb, path):
    """A pod's create (or delete) answered 503: read back, not there (not going), sent again; on_retry hears of it,
    as of the watch's retries (the CLI's `retrying:` line), instead of a silent wait; every pod still runs and goes."""
    nodes = add_nodes(apiserver, 2)
    kube.clock = clock = FakeClock()
    apiserver.inject_fault(method=verb, path=path, status=503, reason="ServiceUnavailable",
                           message="etcdserver: request timed out", times=1)
    heard: list[Exception] = []
    run = runner(kube, clock=clock, on_retry=heard.append).run(nodes)
    assert {o.state for o in run.outcomes} == {PodState.COMPLETED} and host_pods(apiserver) == []
    assert len(apiserver.requests_matching(verb, path)) == 3  # two pods, one of them sent twice
    [said] = [str(e) for e in heard]
    what = "create" if verb == "POST" else "delete"
    assert f"the {what} was answered 503" in said and "request timed out" in said and "attempt 2" in said, said


def test_a_dropped_watch_is_reopened_where_it_stopped(apiserver, kube, healthy_root):
    """The watch's connection drops before its first event: reopened from the list's resourceVersion, not relisted."""
    nodes = add_nodes(apiserver, 2)

    def drop_the_first_watch() -> None:
        apiserver.clear_requests()
        apiserver.inject_fault(method="GET", path=r"/namespaces/rbln-system/pods$", watch=True, drop=True)

    slow_pods_run(apiserver, kube, healthy_root, nodes, 0.5, before=drop_the_first_watch)
    lists, watches = reads(apiserver)
    assert lists == 1 and watches >= 2


def test_an_expired_watch_lists_again(apiserver, kube, healthy_root):
    """The stream ends and the server has forgotten the version it would resume from (410 Expired: etcd compacted
    it): one more LIST, then the watch goes on from it and every pod is judged."""
    nodes = add_nodes(apiserver, 2)

    def compact_and_end_the_watch() -> None:
        apiserver.inject_fault(method="GET", path=r"/namespaces/rbln-system/pods$", watch=True, status=410,
                               reason="Expired", message="too old resource version: 1 (2)")
        apiserver.close_watches()

    def soon() -> None:
        apiserver.clear_requests()
        apiserver.schedule(0.4, compact_and_end_the_watch)

    slow_pods_run(apiserver, kube, healthy_root, nodes, 1.0, before=soon)
    lists, watches = reads(apiserver)
    assert lists == 2 and watches >= 2


def test_a_create_whose_outcome_is_unknown_is_still_cleaned_up(apiserver, kube, kubelet):
    """A create applied by the server whose reply is lost and cannot be settled by reading back: that node failed,
    the others are tried, and the pod that may exist is deleted with the rest (every pod a create was sent for)."""
    nodes = add_nodes(apiserver, 3)
    kube.clock = FakeClock()
    failed = failing_create(apiserver, nth=2, how="unknown")
    run = runner(kube).run(nodes)
    states = [(o.node, o.state, o.reason) for o in run.outcomes]
    assert states == [("n0", PodState.COMPLETED, "Completed"), ("n1", PodState.CREATE_FAILED, "OutcomeUnknown"),
                      ("n2", PodState.COMPLETED, "Completed")]
    assert failed and host_pods(apiserver) == [] and run.left_behind == ()
    assert count(apiserver, "DELETE", rf"/pods/{failed[0]}$") == 1


def test_a_create_interrupted_before_its_reply_is_still_cleaned_up(apiserver, kube, kubelet):
    """Ctrl-C while a create's reply is on its way (the pod exists): the run raises, and deletes that pod too."""
    nodes = add_nodes(apiserver, 4)
    kubelet.hang.update(nodes)
    failed = failing_create(apiserver, nth=3, how="interrupt")
    with pytest.raises(KeyboardInterrupt):
        runner(kube, max_parallel=4).run(nodes)
    assert len(kubelet.created) == 3 and host_pods(apiserver) == []
    assert count(apiserver, "DELETE", rf"/pods/{failed[0]}$") == 1


def test_a_namespace_deleted_mid_run_leaves_the_nodes_not_started_not_attempted(apiserver, kube, kubelet):
    """The run's namespace goes after the first pod ran: every later create would be refused the same way, so the
    nodes not started are not attempted (and why), instead of each failing in turn."""
    nodes = add_nodes(apiserver, 4)
    creates = []

    def delete_namespace_after_first_create(req):
        if req.method == "POST" and req.path.endswith("/pods"):
            creates.append(req)
            if len(creates) == 2:  # before the server handles this second create
                apiserver.auto_namespaces = False
                apiserver.delete_now("Namespace", "rbln-system")

    apiserver.on_request(delete_namespace_after_first_create)
    run = runner(kube, max_parallel=1).run(nodes)
    states = [o.state for o in run.outcomes]
    assert states == [PodState.COMPLETED, PodState.CREATE_FAILED, PodState.NOT_ATTEMPTED, PodState.NOT_ATTEMPTED]
    assert "creating host pods is refused" in run.stopped and "rbln-system" in run.stopped
    assert count(apiserver, "POST", r"/pods$") == 2 and host_pods(apiserver) == []


def test_keep_leaves_the_pods_and_sends_no_delete(apiserver, kube, kubelet):
    nodes = add_nodes(apiserver, 5)
    run = runner(kube, keep=True, max_parallel=2).run(nodes)
    assert {o.state for o in run.outcomes} == {PodState.COMPLETED}  # finished pods do not hold a slot
    assert sorted(run.left_behind) == sorted(host_pods(apiserver)) and len(run.left_behind) == 5
    assert count(apiserver, "DELETE", r"/pods/") == 0


def test_keep_also_keeps_pods_after_an_interrupt(apiserver, kube, kubelet):
    nodes = add_nodes(apiserver, 3)

    def stop(node: str, pod: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        runner(kube, keep=True, on_started=stop).run(nodes)
    assert len(host_pods(apiserver)) == 1 and count(apiserver, "DELETE", r"/pods/") == 0


@pytest.mark.parametrize("parallel", [1, 3])
def test_max_parallel_is_never_exceeded(apiserver, kube, healthy_root, parallel):
    """Pods that run 0.4 s each (the kubelet's time, on the fake's schedule), the runner's clock a FakeClock."""
    nodes = add_nodes(apiserver, 6)
    _, kubelet = slow_pods_run(apiserver, kube, healthy_root, nodes, 0.4, max_parallel=parallel)  # pods overlap
    assert len(kubelet.created) == 6 and kubelet.alive == set()
    assert kubelet.max_alive == parallel  # reached, never exceeded (from the server's pod timeline)


def test_requests_grow_with_nodes_not_with_waiting(apiserver, kube, kubelet):
    """Per node one create, one log read, one delete; for the run one LIST and a watch, whatever the pods in flight."""
    nodes = add_nodes(apiserver, 40)
    apiserver.clear_requests()
    runner(kube, max_parallel=8).run(nodes)
    assert count(apiserver, "POST", r"/pods$") == count(apiserver, "DELETE", r"/pods/") == 40
    assert count(apiserver, "GET", r"/log$") == 40
    assert reads(apiserver) == (1, 1)
    assert len(apiserver.requests) == 3 * 40 + 2


def test_pods_that_take_their_time_cost_no_more_requests(apiserver, kube, healthy_root):
    """Pods running 1.5 s each, in two rounds: still one LIST and one watch stream (a poll would list every round)."""
    nodes = add_nodes(apiserver, 4)
    slow_pods_run(apiserver, kube, healthy_root, nodes, 1.5, before=apiserver.clear_requests, max_parallel=2)
    assert reads(apiserver) == (1, 1)


def test_missing_namespace_is_not_found_naming_the_flag(apiserver, kube, kubelet):
    nodes = add_nodes(apiserver, 2)
    apiserver.auto_namespaces = False  # as a real server: NamespaceLifecycle refuses a missing namespace
    with pytest.raises(NotFound, match=r"namespace nowhere.*pass -n NAMESPACE"):
        runner(kube, namespace="nowhere").run(nodes)
    assert host_pods(apiserver) == []


def test_refused_create_ends_the_run(apiserver, kube, kubelet):
    nodes = add_nodes(apiserver, 2)
    apiserver.forbid("create", "pods")
    with pytest.raises(Forbidden):
        runner(kube).run(nodes)
    assert host_pods(apiserver) == [] and count(apiserver, "POST", r"/pods$") == 1


@pytest.mark.parametrize("kw, says", [
    ({"max_parallel": 0}, "--max-parallel must be at least 1"),
    ({"timeout_s": 0}, "timeout must be positive"),
    ({"image": "a b"}, "invalid image"),
    ({"namespace": "Bad_NS"}, "invalid namespace name"),
])
def test_bad_options_are_invalid_input(kube, kw, says):
    with pytest.raises(InvalidInput, match=says):
        runner(kube, **kw)


def test_bad_node_name_is_refused_before_any_request(apiserver, kube):
    with pytest.raises(InvalidInput, match="invalid node name"):
        runner(kube).run(["ok", "../etc"])
    assert apiserver.requests == []


def test_a_refusal_mid_run_leaves_the_nodes_not_started_not_attempted_and_keeps_the_rest(apiserver, kube, kubelet):
    """RBAC withdrawn after the first pod: the nodes already running finish and report; the others are named as
    not attempted (and why), instead of the run raising and losing what it had."""
    nodes = add_nodes(apiserver, 4)
    creates = []

    def after_first_create(req):
        if req.method == "POST" and req.path.endswith("/pods"):
            creates.append(req)
            if len(creates) == 2:  # the hook runs before authorization: this second create is refused
                apiserver.forbid("create", "pods")

    apiserver.on_request(after_first_create)
    run = runner(kube, max_parallel=1).run(nodes)
    states = [o.state for o in run.outcomes]
    assert states == [PodState.COMPLETED, PodState.CREATE_FAILED, PodState.NOT_ATTEMPTED, PodState.NOT_ATTEMPTED]
    assert "RBAC does not allow create on pods" in run.stopped and run.outcomes[3].message == run.stopped
    assert host_pods(apiserver) == []
