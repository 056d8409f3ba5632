"""HostPreflight: `rblnctl preflight --local`, the host under a root directory checked without any cluster.

Facts are gathered once (rblnctl.preflight.host_facts) and the checks are pure functions of them
(rblnctl.preflight.host_checks). Nothing imports the kubernetes package on this path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rblnctl import constants as C
from rblnctl.errors import InvalidInput
from rblnctl.host.root import HostRoot
from rblnctl.preflight.host_checks import check_host
from rblnctl.preflight.host_facts import gather_host_facts
from rblnctl.preflight.model import METHOD_AUTO, TARGET_HOST, PreflightReport, make_report


@dataclass(kw_only=True)
class HostPreflight:
    """Check the host under `root` for NPU passthrough readiness; `run()` returns a PreflightReport."""

    root: Path | HostRoot = HostRoot()
    method: str = METHOD_AUTO  # host checks are the same for both methods; recorded in the report
    strict: bool = False

    def __post_init__(self) -> None:
        self.root = HostRoot.of(self.root)
        if self.method not in (METHOD_AUTO, *C.METHODS):
            raise InvalidInput(f"unknown method {self.method!r}: expected auto, sandbox or dra")

    def run(self) -> PreflightReport:
        """Gather the facts and check them; raise InvalidInput when root is not a host tree."""
        facts = gather_host_facts(HostRoot.of(self.root).checked())
        if self.method == METHOD_AUTO:
            note = "host checks are the same for the sandbox and DRA methods"
        else:
            note = f"method {self.method} asked for; host checks are the same for both methods"
        return make_report(
            target=TARGET_HOST,
            method=self.method,
            method_note=note,
            checks=check_host(facts),
            strict=self.strict,
        )
