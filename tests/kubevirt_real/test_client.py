"""Issue 27's client findings on real KubeVirt v1.9.0 (findings 1 and 3): client-go's Accept header (virt-api
answers 406 to anything without `*/*`), a non-Status answer of the aggregated API named as such (never "is the
kubeconfig's server URL right?"), the KubeVirt-CR webhook's Warning headers shown as kubectl shows them; and the
fake's virt-api, aggregator and webhook checked answer for answer against the real ones."""

from __future__ import annotations

import json
from typing import Any

import pytest
import urllib3

from rblnctl.errors import AggregatedApiError
from rblnctl.kube import VM_SUBRESOURCES, KubeOptions, connect
from tests.fakes import objects as o
from tests.fakes.apiserver.kubevirt import kubevirt_update_warnings
from tests.kubevirt_real.vms import vm

GA = ('feature gate {} is deprecated (feature state is "General Availability"), therefore it can be safely removed '
      'and is redundant. For more info, please look at: https://github.com/kubevirt/kubevirt/blob/main/docs/'
      'deprecation.md')
SUBRESOURCES = "/apis/subresources.kubevirt.io/v1"


def _raw(url: str, method: str, path: str, *, token: str | None = None, ca: str | None = None,
         headers: dict[str, str] | None = None, body: Any = None,
         content_type: str = "application/json") -> tuple[int, str, str, list[str]]:
    """One request as it goes on the wire, no client in between: (status, Content-Type, body text, Warning values)."""
    pool = urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=ca) if ca else urllib3.PoolManager()
    h = dict(headers or {})
    if token:
        h["Authorization"] = f"Bearer {token}"
    data = None
    if body is not None:
        data, h["Content-Type"] = json.dumps(body).encode(), content_type
    resp = pool.request(method, url + path, body=data, headers=h, retries=False)
    return resp.status, resp.headers.get("Content-Type", ""), resp.data.decode(), resp.headers.getlist("Warning")


def _real(kv, method: str, path: str, **kw: Any) -> tuple[int, str, str, list[str]]:
    return _raw(kv.stack.url, method, path, token=kv.stack.token, ca=str(kv.stack.ca), **kw)


def _warnings(stderr: str) -> list[str]:
    return [line.removeprefix("Warning: ") for line in stderr.splitlines() if line.startswith("Warning: ")]


def test_vm_start_restart_stop_go_through_real_virt_api_without_a_406(kv):
    """Before issue 27 every one of these was exit 3: virt-api answered 406 to `Accept: application/json`."""
    ns = kv.namespace
    kv.api.create(vm(ns, "v1"))
    for args in (("start", "v1", "--wait"), ("restart", "v1", "--yes", "--wait"), ("stop", "v1", "--yes", "--wait")):
        r = kv.rblnctl("vm", *args, "-n", ns, "--timeout", "90s")
        assert r.exit_code == 0, (args, r.stderr)
    asked = [(e.uri.split("?")[0].rsplit("/", 1)[-1], e.code) for e in kv.requests()
             if e.uri.startswith(f"{SUBRESOURCES}/")]
    assert asked == [("start", 202), ("restart", 202), ("stop", 202)]
    assert kv.vm("v1")["spec"]["runStrategy"] == "Halted"
    kv.wait_no_vmi("v1")


def test_the_fakes_virt_api_and_aggregator_answer_as_the_real_ones(kv, apiserver):
    """go-restful's plain-text 406 (before the VM is looked up), 404 and 405, and the APIServices, status, type and
    body alike; and the Accept rblnctl sends is served by both."""
    ns = kv.namespace
    kv.api.create(vm(ns, "v1"))
    apiserver.add(o.vm(ns, "v1", running=False))
    vms = f"{SUBRESOURCES}/namespaces/{ns}/virtualmachines"
    cases = [
        ("PUT", f"{vms}/v1/start", {"Accept": "application/json"}, {}),
        ("PUT", f"{vms}/ghost/stop", {"Accept": "application/json"}, {}),
        ("PUT", f"{vms}/v1/nope", {"Accept": "application/json, */*"}, {}),
        ("GET", f"{vms}/v1/start", {"Accept": "application/json"}, None),
        ("PUT", f"{vms}/v1/stop", {"Accept": "application/json, */*"}, {}),  # a Status: 409 "VM is not running"
        ("GET", "/apis/apiregistration.k8s.io/v1/apiservices/v1.nope.io", {"Accept": "application/json, */*"}, None),
    ]
    for method, path, headers, body in cases:
        real = _real(kv, method, path, headers=headers, body=body)
        fake = _raw(apiserver.url, method, path, headers=headers, body=body)
        if real[1].startswith("application/json"):  # a Status: compare what it says, not its formatting
            real = (real[0], real[1], json.loads(real[2]), real[3])
            fake = (fake[0], fake[1], json.loads(fake[2]), fake[3])
            real[2].pop("metadata", None), fake[2].pop("metadata", None)
        assert real == fake, (method, path, headers)
    assert kv.vm("v1")["spec"]["runStrategy"] == "Halted"  # the 406s changed nothing
    for name in ("v1.subresources.kubevirt.io", "v1.kubevirt.io", "v1."):
        path = f"/apis/apiregistration.k8s.io/v1/apiservices/{name}"
        real, fake = json.loads(_real(kv, "GET", path)[2]), json.loads(_raw(apiserver.url, "GET", path)[2])
        assert ("service" in real["spec"], real["status"]["conditions"][0]["reason"]) == (
            "service" in fake["spec"], fake["status"]["conditions"][0]["reason"]), name
        assert {k: real["spec"].get("service", {}).get(k) for k in ("name", "namespace")} == {
            k: fake["spec"].get("service", {}).get(k) for k in ("name", "namespace")}


def test_a_non_status_answer_of_real_virt_api_names_its_apiservice(kv, monkeypatch):
    """The misdiagnosis of issue 27 (exit 3, "not the Kubernetes API: is the kubeconfig's server URL right?"): the
    answer came from virt-api through kube-apiserver's aggregation layer. Shown with the Accept it used to send."""
    ns = kv.namespace
    kv.api.create(vm(ns, "v1"))
    kube = connect(KubeOptions(kubeconfig=str(kv.kubeconfig)))
    with pytest.raises(AggregatedApiError) as err:
        kube.request("PUT", VM_SUBRESOURCES.path("v1", namespace=ns, sub="nope"), body={})
    assert (err.value.status, err.value.api_service, err.value.service) == (
        404, "v1.subresources.kubevirt.io", "kubevirt/virt-api")
    assert "(404: Page Not Found), not a Kubernetes Status" in str(err.value)

    monkeypatch.setattr("rblnctl.kube.client.ACCEPT", "application/json")  # what rblnctl sent before issue 27
    r = kv.rblnctl("vm", "start", "v1", "-n", ns)
    assert r.exit_code == 1, r.stderr
    [line] = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert line.startswith(
        "error: the aggregated API subresources.kubevirt.io/v1 (APIService v1.subresources.kubevirt.io, Service "
        f"kubevirt/virt-api) answered PUT {VM_SUBRESOURCES.path('v1', namespace=ns, sub='start')} with 406 Not "
        "Acceptable and text/plain; charset=utf-8 (406: Not Acceptable Available representations:), not a Kubernetes "
        "Status: check `kubectl get apiservice v1.subresources.kubevirt.io`")
    assert "server URL" not in line
    assert kv.vm("v1")["spec"]["runStrategy"] == "Halted"


def test_enable_gates_shows_the_real_webhooks_warnings_as_kubectl_and_the_fakes_webhook_agrees(kv):
    """virt-operator's KubeVirt-CR webhook warns on every GA gate of the changed list; rblnctl prints each once on
    stderr as kubectl does (-o json: stdout the document only; a server dry run too)."""
    kv.set_gates(["NUMA"])  # an administrator's GA gate, listed before
    before = kv.kubevirt_cr()
    kv.mark()
    r = kv.rblnctl("kubevirt", "enable-gates", "LiveMigration", "--yes", "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["plan"]["featureGatesAfter"] == ["NUMA", "HostDevices", "LiveMigration"]
    assert _warnings(r.stderr) == [GA.format("NUMA"), GA.format("LiveMigration")]
    assert _warnings(r.stderr) == kubevirt_update_warnings(before, kv.kubevirt_cr())  # the fake's model says so too

    r = kv.rblnctl("kubevirt", "enable-gates", "GPU", "--yes", "--dry-run=server")
    assert r.exit_code == 0, r.stderr
    assert _warnings(r.stderr) == [GA.format("NUMA"), GA.format("LiveMigration"), GA.format("GPU")]
    assert "GPU" not in kv.kubevirt_cr()["spec"]["configuration"]["developerConfiguration"]["featureGates"]


def test_the_fakes_kubevirt_cr_webhook_warns_header_for_header_as_the_real_one(kv):
    """The same server dry-run patches, on the real webhook and on the fake's model of it (kubevirt_update_warnings):
    GA, deprecated, discontinued, Alpha and unknown gates, a duplicate, the deprecated mediatedDevicesTypes."""
    cr = "/apis/kubevirt.io/v1/namespaces/kubevirt/kubevirts/kubevirt"
    before = kv.kubevirt_cr()
    for patch in (
        {"featureGates": ["LiveMigration", "HotplugVolumes", "HostDevices", "NUMA", "GPU", "LiveMigration",
                          "MultiArchitecture", "DockerSELinuxMCSWorkaround", "Macvtap", "VirtIOFS", "Passt",
                          "PasstIPStackMigration", "DisableMDEVConfiguration", "ExperimentalVirtiofsSupport",
                          "PersistentReservation", "VideoConfig", "MigrationPriorityQueue"]},
        {"featureGates": ["HostDevices", "HostDevicesWithDRA"]},
        {"featureGates": before["spec"]["configuration"]["developerConfiguration"].get("featureGates") or []},
    ):
        body = {"spec": {"configuration": {"developerConfiguration": patch,
                                           "mediatedDevicesConfiguration": {"mediatedDevicesTypes": ["nvidia-222"]}}}}
        status, _, text, warnings = _real(kv, "PATCH", cr + "?dryRun=All", body=body,
                                          content_type="application/merge-patch+json")
        assert status == 200, text
        after = json.loads(text)
        fake_headers = ['299 - "' + w.replace("\\", "\\\\").replace('"', '\\"') + '"'
                        for w in dict.fromkeys(kubevirt_update_warnings(before, after))]
        assert warnings == fake_headers, patch
