"""What several `rblnctl kubevirt` verbs share: the group's Typer app they register on, the KubeVirt CR's options,
the conflict-safe writer's arguments and the one edit flow of a gate or device change."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypedDict, TypeVar

import typer

from rblnctl.cli.state import state

if TYPE_CHECKING:  # the library's types, for the checker only: nothing of the library is imported at startup
    from rblnctl.cli.output import OutputSpec, View
    from rblnctl.kube import Kube
    from rblnctl.kubevirt.cr import CrWriteOptions
    from rblnctl.kubevirt.devices import DevicePlan, DeviceResult
    from rblnctl.kubevirt.gates import GatePlan, GateResult
    from rblnctl.plan import Plan

    class CrPlan(Plan, Protocol):
        """A KubeVirt CR edit's plan (GatePlan, DevicePlan): which CR it patches."""

        @property
        def name(self) -> str: ...

        @property
        def namespace(self) -> str: ...

    class CrResult(Protocol):
        """A KubeVirt CR edit's result (GateResult, DeviceResult)."""

        @property
        def changed(self) -> bool: ...

    P = TypeVar("P", bound=CrPlan)
    R = TypeVar("R", bound=CrResult)
else:
    P, R = TypeVar("P"), TypeVar("R")  # bound at type-check time only: the library is not imported at startup

app = typer.Typer(
    help="Edit the KubeVirt CR for RBLN NPUs: feature gates and permitted host devices, conflict-safely. "
         "A CR the HyperConverged Cluster Operator manages is refused: edit its HyperConverged CR instead.",
    no_args_is_help=True,
)

class WriterArgs(TypedDict):
    """The arguments every KubeVirt CR writer (GateEditor, DevicePermitter) takes."""

    kube: Kube
    options: CrWriteOptions
    on_retry: Callable[[int, str], None]


def retry_line(what: str, attempt: int, message: str) -> str:
    from rblnctl.kubevirt.cr import LOST_REPLY

    if message.startswith(LOST_REPLY):  # a lost reply the read-back showed not applied
        return f"{message} (attempt {attempt}); retrying"
    return f"{what} changed while we were writing it (attempt {attempt}); re-reading and retrying"


def on_retry(attempt: int, message: str) -> None:
    from rblnctl.cli.console import info

    info(retry_line("the KubeVirt CR", attempt, message))


def writer_args(ctx: typer.Context, name: str | None, force: bool, mode: str | None) -> WriterArgs:
    from rblnctl.kubevirt.cr import CrWriteOptions

    st = state(ctx)
    # -n/--namespace is global, as in kubectl; unset, the CR is looked for in every namespace.
    options = CrWriteOptions(name=name, namespace=st.namespace, force=force, server_dry_run=mode == "server")
    return {"kube": st.kube(), "options": options, "on_retry": on_retry}


def edit(apply: Callable[[P], R], plan: P, *, mode: str | None, yes: bool, output: OutputSpec,
         plan_view: Callable[[P], View], result_view: Callable[[R], View], noop: str, done: Callable[[R], str],
         disruptive: bool = False) -> None:
    """Run a KubeVirt CR edit through the one flow. An edit that only adds is reversible and never prompts; one
    that turns something off (`disruptive`: a gate) asks first, exit 2 without --yes when nobody can answer."""
    from rblnctl.cli.flow import Mutation, run

    ref = f"{plan.namespace}/{plan.name}"
    run(Mutation[P, R](
        plan=plan, apply=apply, refusal=f"refusing to edit KubeVirt {ref}", question=f"Patch KubeVirt {ref}?",
        disruptive=disruptive, dry_run=mode, yes=yes, output=output, plan_view=plan_view, result_view=result_view,
        noop_message=noop, done_message=lambda r: done(r) if r.changed else f"{noop}; nothing to change",
    ))


def patch_lines(plan: GatePlan | DevicePlan, result: GateResult | DeviceResult | None) -> list[str]:
    """A client dry run shows the JSON Patch it would send."""
    import json

    from rblnctl.kubevirt.cr import PATCH_CONTENT_TYPE

    if result is not None or plan.noop or not plan.patch:
        return []
    return [f"patch ({PATCH_CONTENT_TYPE}): {json.dumps(plan.patch, separators=(',', ':'))}"]
