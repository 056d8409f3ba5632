"""`preflight --hosts`: the host checks of `preflight --local` on every NPU node, through host pods, merged per node.

Each NPU node gets a pod (rblnctl.hostpods) running `rblnctl preflight --local --root /host -o json`
with the node's proc/, sys/, dev/ and lib/modules/ mounted read-only (host_facts.HOST_PATHS). Its
report's findings come back with the node as their scope; a node whose pod did not run to a report
is one `host.pod` FAIL naming why; `hosts.pods` says how many nodes were checked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from rblnctl import __version__
from rblnctl import constants as C
from rblnctl.clock import SYSTEM_CLOCK, Clock
from rblnctl.errors import RblnError
from rblnctl.hostpods.runner import HostPodRun, HostPodRunner, PodOutcome, PodState, json_document
from rblnctl.hostpods.spec import HostCommand, default_image
from rblnctl.kube import Kube
from rblnctl.preflight.host_facts import HOST_PATHS
from rblnctl.preflight.model import SCOPE_CLUSTER, TARGET_HOST, CheckResult, Findings, Status

PREFLIGHT_LOCAL = HostCommand(
    name="preflight",
    args=("preflight", "--local", "--root", C.HOST_POD_ROOT, "-o", "json"),
    host_paths=HOST_PATHS,
)
REPORT_KIND = "PreflightReport"  # the document kind `preflight -o json` prints (docs/output.md)
T_POD = "Host checks ran on the node"
T_PODS = "Host checks ran on every NPU node"
DOCS = "docs/preflight.md, \"Host checks on every node\""


def _noop(*_: object) -> None:
    return None


@dataclass(frozen=True, kw_only=True)
class HostChecks:
    """How `--hosts` runs its pods: image, namespace, how many at once, each pod's deadline, keep them or not."""

    image: str = field(default_factory=default_image)
    namespace: str = C.OPERATOR_NAMESPACE  # admits hostPath pods already (the operator's own DaemonSets use them)
    max_parallel: int = 20
    timeout_s: float = 120.0  # per pod, from its creation
    poll_interval_s: float = 1.0
    keep: bool = False  # leave the pods in place (to read them with kubectl)
    clock: Clock = SYSTEM_CLOCK
    on_started: Callable[[str, str], None] = _noop  # (node, pod)
    on_finished: Callable[[PodOutcome], None] = _noop
    on_left_behind: Callable[[list[str]], None] = _noop
    on_retry: Callable[[RblnError], None] = _noop  # the pods' watch, a create or a delete tried again (HostPodRunner)

    def runner(self, kube: Kube) -> HostPodRunner:
        """The HostPodRunner these options describe (validates them: InvalidInput)."""
        return HostPodRunner(kube=kube, command=PREFLIGHT_LOCAL, image=self.image, namespace=self.namespace,
                             max_parallel=self.max_parallel, timeout_s=self.timeout_s,
                             poll_interval_s=self.poll_interval_s, keep=self.keep, clock=self.clock,
                             on_started=self.on_started, on_finished=self.on_finished,
                             on_left_behind=self.on_left_behind, on_retry=self.on_retry)


def parse_host_report(text: str, *, node: str) -> list[CheckResult]:
    """The findings of a `preflight --local -o json` report in a pod's log, scoped to `node`.

    The log holds the container's stdout and stderr in one stream, so lines before the report (and
    the `error: preflight: ...` line after it, on a FAIL) are skipped. Raises ValueError when no
    host report is there.
    """
    data = json_document(text)
    if data.get("kind", REPORT_KIND) != REPORT_KIND or data.get("target") != TARGET_HOST \
            or not isinstance(data.get("checks"), list):
        raise ValueError("the log's JSON is not a host preflight report")
    try:
        return [CheckResult.from_dict(c, scope=node) for c in data["checks"]]
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"a finding in the report is malformed ({e})") from e


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "no output"


def outcome_findings(o: PodOutcome, run: HostPodRun, out: Findings) -> bool:
    """Add one node's findings: its host report's, or a `host.pod` FAIL saying why there is none. True when checked."""
    ns, image, pod = run.namespace, run.image, o.pod
    describe = f"kubectl describe pod -n {ns} {pod}"
    if o.state == PodState.COMPLETED:
        if o.exit_code in (0, 1):
            try:
                out.items.extend(parse_host_report(o.log, node=o.node))
                return True
            except ValueError as e:
                why = f"{e}: {_last_line(o.log)}"
        else:
            why = f"exited {o.exit_code}: {_last_line(o.log)}"
        out.add("host.pod", T_POD, o.node, Status.FAIL, f"pod {ns}/{pod} ran but gave no report ({why})"
                + (f"; {o.message}" if o.message else ""),
                f"make sure {image} runs the same rblnctl as this one ({__version__}): rebuild it or pass --image "
                f"({DOCS})")
    elif o.state == PodState.UNSCHEDULABLE:
        out.add("host.pod", T_POD, o.node, Status.FAIL, f"pod {ns}/{pod} cannot be scheduled: {o.message}",
                f"see what keeps it off the node with `kubectl describe node {o.node}`, then rerun",
                f"kubectl describe node {o.node}")
    elif o.state == PodState.IMAGE_PULL:
        out.add("host.pod", T_POD, o.node, Status.FAIL,
                f"image {image} cannot be pulled on the node ({o.reason}: {o.message})",
                f"build and push the rblnctl image, then pass --image REGISTRY/rblnctl:{__version__} ({DOCS})")
    elif o.state == PodState.REJECTED:
        out.add("host.pod", T_POD, o.node, Status.FAIL,
                f"the kubelet rejected pod {ns}/{pod}: {o.reason or 'Failed'}: {o.message or 'no message'}",
                f"see the node's capacity and conditions with `kubectl describe node {o.node}`, then rerun",
                f"kubectl describe node {o.node}")
    elif o.state == PodState.CREATE_FAILED:
        out.add("host.pod", T_POD, o.node, Status.FAIL, f"pod {ns}/{pod} could not be created: {o.message}",
                "admission refused it (a ResourceQuota on the namespace, Pod Security): make room, or pass another "
                "-n NAMESPACE, then rerun" if o.reason == "AdmissionDenied" else
                "the API server kept failing the create (retried): rerun when it answers")
    elif o.state == PodState.NOT_ATTEMPTED:
        out.add("host.pod", T_POD, o.node, Status.FAIL, f"not checked: {o.message}",
                "fix what stopped the run, then rerun")
    elif o.state == PodState.TIMED_OUT:
        out.add("host.pod", T_POD, o.node, Status.FAIL, f"pod {ns}/{pod} {o.message}",
                f"rerun with --keep and read `kubectl logs -n {ns} {pod}`: the check runs and did not finish (a host "
                "read that hangs), a larger --timeout helps a slow host" if o.reason.startswith("Running") else
                f"rerun with --keep and read `{describe}`; a larger --timeout helps a slow image pull")
    else:
        out.add("host.pod", T_POD, o.node, Status.FAIL, f"pod {ns}/{pod}: {o.message}", "rerun")
    return False


def with_node_mode(result: CheckResult, mode: str | None) -> CheckResult:
    """A node's host finding with what only the cluster knows: its mode decides `vfio recover --mode`."""
    from rblnctl.preflight.host_checks import recover_bdfs, recover_command

    bdfs = recover_bdfs(result)
    if not bdfs or mode is None:
        return result
    from rblnctl.remedy import Remedy

    said = result.remedy.text if isinstance(result.remedy, Remedy) else result.remedy  # the pod's, spelt
    return dataclasses.replace(result, remedy=Remedy(f"this node is in {mode} mode: {{command}}; {said}",
                                                     recover_command(bdfs, mode)), remedy_command="")


def host_findings(kube: Kube, nodes: Sequence[str], opts: HostChecks,
                  modes: Mapping[str, str] | None = None) -> tuple[CheckResult, list[CheckResult]]:
    """Run the host checks on `nodes`: (the cluster-scope `hosts.pods` summary, every per-node finding).

    Per node, in node order: the findings of its host report, or one `host.pod` FAIL. Pods are
    always deleted (also on errors and Ctrl-C), unless opts.keep. `modes` (node -> effective mode)
    completes remedies whose command depends on it.
    """
    runner = opts.runner(kube)
    top = Findings()
    if not nodes:
        top.add("hosts.pods", T_PODS, SCOPE_CLUSTER, Status.SKIP, "no NPU node to check (see nfd.npu-nodes)")
        return top.items[0], []
    run = runner.run(nodes)
    per_node = Findings()
    failed: dict[str, int] = {}
    for o in run.outcomes:
        if not outcome_findings(o, run, per_node):
            failed[o.state.value] = failed.get(o.state.value, 0) + 1
    where = f"image {run.image}, namespace {run.namespace}"
    cleanup = f"kubectl delete pods -n {run.namespace} -l {runner.selector}"
    if failed:
        kinds = ", ".join(f"{n} {k}" for k, n in failed.items())
        checked = len(nodes) - sum(failed.values())
        top.add("hosts.pods", T_PODS, SCOPE_CLUSTER, Status.FAIL,
                f"{checked} of {len(nodes)} NPU nodes checked, {sum(failed.values())} not ({kinds}; see host.pod)"
                + (f"; stopped: {run.stopped}" if run.stopped else "") + f"; {where}",
                "fix what host.pod names for each node, then rerun")
    elif run.left_behind and not opts.keep:
        top.add("hosts.pods", T_PODS, SCOPE_CLUSTER, Status.WARN,
                f"all {len(nodes)} NPU nodes checked ({where}), but {len(run.left_behind)} pod(s) could not be "
                f"deleted: {', '.join(run.left_behind)}", f"delete them: `{cleanup}`", cleanup)
    else:
        kept = f"; pods kept (--keep): `{cleanup}` removes them" if opts.keep else ""
        top.add("hosts.pods", T_PODS, SCOPE_CLUSTER, Status.PASS,
                f"{len(nodes)} NPU node{'s' if len(nodes) != 1 else ''} checked by host pods ({where}){kept}")
    return top.items[0], [with_node_mode(r, (modes or {}).get(r.scope)) for r in per_node.items]
