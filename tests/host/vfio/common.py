"""Helpers shared by the vfio library tests: a binder on a simulated kernel and what to read back from it."""

from __future__ import annotations

import json

import pytest

from rblnctl.errors import Refused
from rblnctl.host.vfio import VfioBinder
from tests.fakes.clock import FakeClock
from tests.fakes.sysfs import SimKernel

A, B, C3, D = "0000:3b:00.0", "0000:3c:00.0", "0000:3d:00.0", "0000:3e:00.0"


def make(k: SimKernel, **kw) -> VfioBinder:
    kw.setdefault("is_root", lambda: True)
    kw.setdefault("clock", FakeClock())
    kw.setdefault("writer", k.writer)
    return VfioBinder(root=k.root, state_file=k.root / "state.json", **kw)

def blocker_texts(plan_or_error) -> list[str]:
    return [str(b) for b in plan_or_error.blockers]

def state(k: SimKernel) -> dict:
    p = k.root / "state.json"
    return json.loads(p.read_text())["devices"] if p.exists() else {}

def on_host_driver(k: SimKernel, bdf: str) -> bool:
    return k.driver_of(bdf) == "rebellions" and k.override_of(bdf) is None

def refused(b: VfioBinder, k: SimKernel, bdfs, match: str) -> Refused:
    before = k.checksum()
    plan = b.plan("bind", bdfs)
    with pytest.raises(Refused) as exc:
        b.apply(plan)
    assert any(match in x for x in blocker_texts(exc.value)), exc.value.blockers
    assert not any("--" in x for x in blocker_texts(exc.value)), "library messages name no CLI flag"
    assert k.checksum() == before and k.writes == []
    return exc.value
