"""An interrupted `vm attach --restart` whose clean-up start meets an unresponsive virt-api, on real KubeVirt v1.9.0:
the hostile tester's case (the aggregation layer answering 503, the clean-up retrying for 45-65 s). The APIService of
virt-api is pointed at a port nothing listens on, so kube-apiserver answers every subresource request 503 itself."""

from __future__ import annotations

import time
from typing import Any

from rblnctl.errors import Interrupted
from rblnctl.kube.writes import WRITE_ATTEMPTS
from tests.kubevirt_real.test_restart import SANDBOX_RESOURCE, STOPPED, create, npus_permitted, run, strike, vm

API_SERVICE = "/apis/apiregistration.k8s.io/v1/apiservices/v1.subresources.kubevirt.io"


def is_npu_patch(method: str, path: str, body: Any) -> bool:
    return method == "PATCH" and isinstance(body, list) and any(
        str(op.get("path", "")).startswith("/spec/template/") for op in body if isinstance(op, dict))


def test_an_interrupted_restart_whose_start_meets_a_503_ends_within_its_clean_up_and_says_so(kv, monkeypatch):
    npus_permitted(kv)
    create(kv, vm(kv.namespace, "v", run_strategy="Always", host_devices=[SANDBOX_RESOURCE]))
    kv.wait_vmi_phase("v", "Running")
    port = kv.api.request("GET", API_SERVICE)["spec"]["service"]["port"]

    def virt_api_goes_away(send: Any) -> Any:  # as the NPU patch is sent: virt-api stops answering, then SIGTERM
        kv.api.request("PATCH", API_SERVICE, {"spec": {"service": {"port": 1}}},
                       content_type="application/merge-patch+json")
        raise Interrupted(15)

    strike(monkeypatch, is_npu_patch, virt_api_goes_away)
    try:
        code, _, err = run(kv, "attach", "v", "--npus", "2", "--restart", "--yes")
    finally:
        kv.api.request("PATCH", API_SERVICE, {"spec": {"service": {"port": port}}},
                       content_type="application/merge-patch+json")
        monkeypatch.undo()
    assert code == 143, err
    assert f"VM {kv.namespace}/v is left stopped" in err and "not within the 5s an interrupted run gives it" in err
    assert "503" in err and f"virtctl start v -n {kv.namespace}" in err
    # the start was tried within CLEANUP_TIMEOUT_S (backoffs 0.5, 1, 2 s): fewer times than writes.WRITE_ATTEMPTS,
    # which an unbounded clean-up sends (and on a virt-api slow to fail, each for up to --request-timeout)
    starts = [e for e in kv.requests() if e.verb == "update" and e.uri.split("?")[0].endswith("/v/start")]
    assert 1 <= len(starts) < WRITE_ATTEMPTS
    assert kv.vm("v")["spec"]["runStrategy"] == "Halted" and STOPPED in kv.vm("v")["metadata"]["annotations"]
    deadline = time.monotonic() + 30  # the aggregation layer takes the port back within moments
    while True:  # the printed recovery: the same command starts the VM rblnctl stopped
        code, doc, err = run(kv, "attach", "v", "--npus", "2", "--restart", "--yes", "--timeout", "60s")
        if code == 0 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert code == 0, err
    assert kv.vm("v")["spec"]["runStrategy"] == "Always" and STOPPED not in (kv.vm("v")["metadata"].get("annotations")
                                                                          or {})
