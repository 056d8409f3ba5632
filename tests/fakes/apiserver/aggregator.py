"""kube-aggregator's part of kube-apiserver: the APIService objects, and what it answers for an aggregated API
whose server it cannot reach.

``GET /apis/apiregistration.k8s.io/v1/apiservices[/NAME]`` lists one APIService per group version served, as
kube-apiserver keeps them (measured on v1.36.2 with KubeVirt v1.9.0, ../shared/kubevirt): a Local one for each
built-in or CRD group version (``v1.`` for the core group, ``v1.kubevirt.io``...; no ``spec.service``, Available
``Local``, "Local APIServices are always available") and, while KubeVirt's VMs are served, virt-api's
``v1.subresources.kubevirt.io`` (``spec.service`` kubevirt/virt-api, as virt-operator installs it: labels
``app.kubernetes.io/managed-by: virt-operator``, ``kubevirt.io: virt-api-aggregator``; Available ``Passed``).
Its 404 is the registry's Status (``apiservices.apiregistration.k8s.io "NAME" not found``). Other verbs are 405.

``virt_api_available = False`` plays a virt-api that cannot be reached: the APIService's Available condition is
False as kube-aggregator's availability controller writes it when the Service is gone (``ServiceNotFound``,
``service/virt-api in "kubevirt" is not present``, measured), and every request under
``/apis/subresources.kubevirt.io/`` is answered by the proxy itself: 503 ``service unavailable\\n`` as plain text
(k8s.io/kube-aggregator pkg/apiserver/handler_proxy.go proxyError, http.Error; measured), discovery included.
The group stays in ``/apis`` (as measured: the aggregator lists it while unavailable).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from tests.fakes.apiserver.discovery import ExtraGroup
from tests.fakes.apiserver.errors import GroupResource, PlainError, method_not_allowed, not_found

if TYPE_CHECKING:
    from tests.fakes.apiserver.config import Settings
    from tests.fakes.apiserver.kubevirt import KubeVirt
    from tests.fakes.apiserver.resources import ResourceTable

GROUP = "apiregistration.k8s.io"
_APISERVICES = GroupResource(GROUP, "apiservices")
_PATH = re.compile(r"/apis/apiregistration\.k8s\.io/v1/apiservices(?:/([^/]+))?/?")
SERVICE_UNAVAILABLE = "service unavailable\n"
VIRT_API = "v1.subresources.kubevirt.io"
_VIRT_API_PREFIX = "/apis/subresources.kubevirt.io/"
_CREATED = "2026-01-01T00:00:00Z"


class Aggregator:
    def __init__(self, table: ResourceTable, kubevirt: KubeVirt, settings: Settings):
        self.table = table
        self.kubevirt = kubevirt
        self.settings = settings

    def discovery_groups(self) -> list[ExtraGroup]:
        verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
        return [(GROUP, "v1", [
            {"name": "apiservices", "singularName": "apiservice", "namespaced": False, "kind": "APIService",
             "verbs": verbs},
            {"name": "apiservices/status", "singularName": "", "namespaced": False, "kind": "APIService",
             "verbs": ["get", "patch", "update"]}])]

    def handle(self, method: str, path: str) -> tuple[int, Any] | None:
        """The answer to an APIService request, or the proxy's own answer for an unreachable virt-api; else None."""
        if path.startswith(_VIRT_API_PREFIX) and self.kubevirt.served() and not self.settings.virt_api_available:
            raise PlainError(503, SERVICE_UNAVAILABLE)
        m = _PATH.fullmatch(path)
        if m is None:
            return None
        if method != "GET":
            raise method_not_allowed()
        services = self.api_services()
        if m.group(1) is None:
            return 200, {"kind": "APIServiceList", "apiVersion": f"{GROUP}/v1", "metadata": {"resourceVersion": "1"},
                         "items": services}
        for s in services:
            if s["metadata"]["name"] == m.group(1):
                return 200, s
        raise not_found(_APISERVICES, m.group(1))

    def api_services(self) -> list[dict]:
        """Every APIService, sorted by name as the registry lists them."""
        versions = {(r.group, r.version) for r in self.table.all()} | {(GROUP, "v1")}
        out = [_local(group, version) for group, version in versions]
        if self.kubevirt.served():
            out.append(self._virt_api())
        return sorted(out, key=lambda s: s["metadata"]["name"])

    def _virt_api(self) -> dict:
        available = self.settings.virt_api_available
        return {
            "apiVersion": f"{GROUP}/v1", "kind": "APIService",
            "metadata": {"name": VIRT_API, "creationTimestamp": _CREATED,
                         "annotations": {"certificates.kubevirt.io/secret": "kubevirt-virt-api-certs"},
                         "labels": {"app.kubernetes.io/managed-by": "virt-operator",
                                    "kubevirt.io": "virt-api-aggregator"}},
            "spec": {"group": "subresources.kubevirt.io", "version": "v1", "groupPriorityMinimum": 1000,
                     "versionPriority": 15, "service": {"name": "virt-api", "namespace": "kubevirt", "port": 443}},
            "status": {"conditions": [
                {"type": "Available", "lastTransitionTime": _CREATED,
                 **({"status": "True", "reason": "Passed", "message": "all checks passed"} if available else
                    {"status": "False", "reason": "ServiceNotFound",
                     "message": 'service/virt-api in "kubevirt" is not present'})}]},
        }


def _local(group: str, version: str) -> dict:
    return {
        "apiVersion": f"{GROUP}/v1", "kind": "APIService",
        "metadata": {"name": f"{version}.{group}", "creationTimestamp": _CREATED,
                     "labels": {"kube-aggregator.kubernetes.io/automanaged": "true"}},
        "spec": {"group": group, "version": version, "groupPriorityMinimum": 1000, "versionPriority": 100}
        if group else {"version": version, "groupPriorityMinimum": 18000, "versionPriority": 1},
        "status": {"conditions": [{"type": "Available", "status": "True", "reason": "Local",
                                   "message": "Local APIServices are always available",
                                   "lastTransitionTime": _CREATED}]},
    }
