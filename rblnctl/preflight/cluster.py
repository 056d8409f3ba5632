"""ClusterPreflight: cluster readiness through the API server, in a bounded number of requests.

Facts are read first (rblnctl.preflight.facts: one paged list per resource type, whatever the
cluster size; NodeFeature objects are listed once for all nodes), then every check is a pure
function of them (rblnctl.preflight.checks). With `hosts`, the host checks of `--local` also run on
every NPU node through host pods (rblnctl.preflight.hosts), one row per node per host check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rblnctl import constants as C
from rblnctl.errors import InvalidInput
from rblnctl.kube import Kube
from rblnctl.preflight.checks import check_cluster
from rblnctl.preflight.facts import gather
from rblnctl.preflight.helm import HelmClient
from rblnctl.preflight.model import METHOD_AUTO, SCOPE_CLUSTER, TARGET_CLUSTER, PreflightReport, make_report

if TYPE_CHECKING:
    from rblnctl.preflight.hosts import HostChecks


@dataclass(kw_only=True)
class ClusterPreflight:
    """Check a cluster for NPU passthrough readiness through its API server; `run()` returns the report."""

    kube: Kube
    method: str = METHOD_AUTO  # auto | sandbox | dra
    node: str | None = None  # check only this node
    selector: str | None = None  # label selector narrowing the NPU nodes
    strict: bool = False  # WARN fails too
    helm: HelmClient = field(default_factory=HelmClient)  # the local helm client (tests inject its runner)
    hosts: HostChecks | None = None  # also run the host checks on each NPU node, in pods (`--hosts`)

    def __post_init__(self) -> None:
        if self.method not in (METHOD_AUTO, *C.METHODS):
            raise InvalidInput(f"unknown method {self.method!r}: expected auto, sandbox or dra")
        if self.node and self.selector:
            raise InvalidInput("give --node or --selector, not both")
        if self.hosts is not None:
            self.hosts.runner(self.kube)  # bad pod options are refused before anything is read

    def run(self) -> PreflightReport:
        """Read the facts and check them."""
        facts = gather(self.kube, method=self.method, node=self.node, selector=self.selector, helm=self.helm)
        checks = check_cluster(facts)
        if self.hosts is not None:
            from rblnctl.preflight.hosts import host_findings

            names = [n["metadata"]["name"] for n in facts.npu_nodes]
            summary, per_node = host_findings(self.kube, names, self.hosts, facts.effective_modes())
            # cluster-wide findings first, then per node (the report's order)
            at = next((i for i, c in enumerate(checks) if c.scope != SCOPE_CLUSTER), len(checks))
            checks[at:at] = [summary]
            checks += per_node
        return make_report(
            target=TARGET_CLUSTER,
            method=facts.method,
            method_note=facts.method_note,
            checks=checks,
            strict=self.strict,
            nodes=len(facts.npu_nodes),
        )
