"""ClusterPreflight: cluster readiness through the API server, in a bounded number of requests.

Facts are read first (rblnctl.preflight.facts: one paged list per resource type, whatever the
cluster size; NodeFeature objects are listed once for all nodes), then every check is a pure
function of them (rblnctl.preflight.checks).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rblnctl import constants as C
from rblnctl.errors import InvalidInput
from rblnctl.kube import Kube
from rblnctl.preflight.checks import check_cluster
from rblnctl.preflight.facts import gather
from rblnctl.preflight.helm import HelmClient
from rblnctl.preflight.model import METHOD_AUTO, TARGET_CLUSTER, PreflightReport, make_report


@dataclass(kw_only=True)
class ClusterPreflight:
    """Check a cluster for NPU passthrough readiness through its API server; `run()` returns the report."""

    kube: Kube
    method: str = METHOD_AUTO  # auto | sandbox | dra
    node: str | None = None  # check only this node
    selector: str | None = None  # label selector narrowing the NPU nodes
    strict: bool = False  # WARN fails too
    helm: HelmClient = field(default_factory=HelmClient)  # the local helm client (tests inject its runner)

    def __post_init__(self) -> None:
        if self.method not in (METHOD_AUTO, *C.METHODS):
            raise InvalidInput(f"unknown method {self.method!r}: expected auto, sandbox or dra")
        if self.node and self.selector:
            raise InvalidInput("give --node or --selector, not both")

    def run(self) -> PreflightReport:
        """Read the facts and check them."""
        facts = gather(self.kube, method=self.method, node=self.node, selector=self.selector, helm=self.helm)
        return make_report(
            target=TARGET_CLUSTER,
            method=facts.method,
            method_note=facts.method_note,
            checks=check_cluster(facts),
            strict=self.strict,
            nodes=len(facts.npu_nodes),
        )
