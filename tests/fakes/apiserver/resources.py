"""What the fake serves: the ``Resource`` table, its lookups, and the mapping of a URL to a resource.

``RESOURCES`` has one line per resource. A created CustomResourceDefinition adds its resource
(``ResourceTable.serve_crd``); ``add_resource``/``remove_resource`` change the table at run time.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Iterable
from urllib.parse import unquote

from tests.fakes.apiserver.errors import unknown_path

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class Resource:
    """One served resource. ``custom`` marks CustomResourceDefinition-backed resources."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ("status",)
    custom: bool = False
    # Extra fieldSelector fields beyond metadata.name / metadata.namespace (as the real registry).
    field_selectors: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    singular: str = ""
    #: The verbs discovery lists and the server accepts (others are 405 MethodNotAllowed).
    verbs: tuple[str, ...] = ALL_VERBS

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def id(self) -> str:
        """``plural`` for the core group, ``plural.group`` otherwise (as kubectl spells it)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def singular_name(self) -> str:
        return self.singular or self.kind.lower()

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    @property
    def returns_deleted_object(self) -> bool:
        # Real registries: pods and custom resources return the object, most others a Status.
        return self.custom or self.id == "pods"


_POD_FIELDS = (
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)
_EVENT_FIELDS = ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
                 "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
                 "reason", "reportingComponent", "source", "type")
# events.k8s.io/v1's field labels (pkg/apis/events/v1 conversion: the core names, renamed)
_EVENT_V1_FIELDS = ("regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid",
                    "regarding.apiVersion", "regarding.resourceVersion", "regarding.fieldPath", "reason",
                    "reportingController", "type")
_R = Resource
RESOURCES: tuple[Resource, ...] = (
    _R("", "v1", "nodes", "Node", False, ("no",), ("status", "proxy"), field_selectors=("spec.unschedulable",)),
    _R("", "v1", "pods", "Pod", True, ("po",), ("status", "eviction", "log", "binding"),
       field_selectors=_POD_FIELDS, categories=("all",)),
    _R("", "v1", "namespaces", "Namespace", False, ("ns",), ("status", "finalize"), field_selectors=("status.phase",)),
    _R("", "v1", "events", "Event", True, ("ev",), (), field_selectors=_EVENT_FIELDS),
    _R("", "v1", "configmaps", "ConfigMap", True, ("cm",), ()),
    _R("events.k8s.io", "v1", "events", "Event", True, ("ev",), (), field_selectors=_EVENT_V1_FIELDS),
    _R("apps", "v1", "daemonsets", "DaemonSet", True, ("ds",), ("status",), categories=("all",)),
    _R("apps", "v1", "replicasets", "ReplicaSet", True, ("rs",), ("status", "scale"), categories=("all",)),
    _R("apps", "v1", "deployments", "Deployment", True, ("deploy",), ("status", "scale"), categories=("all",)),
    _R("apps", "v1", "statefulsets", "StatefulSet", True, ("sts",), ("status", "scale"), categories=("all",)),
    _R("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ("pdb",), ("status",)),
    _R("coordination.k8s.io", "v1", "leases", "Lease", True, (), ()),
    _R("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", False, (), (),
       verbs=("create",)),
    _R("authorization.k8s.io", "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview", False, (), (),
       verbs=("create",)),
    _R("authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview", False, (), (), verbs=("create",)),
    _R("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False,
       ("crd", "crds"), ("status",)),
    _R("kubevirt.io", "v1", "kubevirts", "KubeVirt", True, ("kv", "kvs"), ("status",), custom=True),
    _R("kubevirt.io", "v1", "virtualmachines", "VirtualMachine", True, ("vm", "vms"), ("status",), custom=True),
    _R("kubevirt.io", "v1", "virtualmachineinstances", "VirtualMachineInstance", True, ("vmi", "vmis"),
       ("status",), custom=True),
    _R("rebellions.ai", "v1beta1", "rblnclusterpolicies", "RBLNClusterPolicy", False, ("rcp", "rblncp"),
       ("status",), custom=True),
    _R("nfd.k8s-sigs.io", "v1alpha1", "nodefeatures", "NodeFeature", True, (), (), custom=True),
    _R("nfd.k8s-sigs.io", "v1alpha1", "nodefeaturerules", "NodeFeatureRule", False, ("nfr",), (), custom=True),
    _R("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False, (), ()),
    _R("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False, (), (),
       field_selectors=("spec.nodeName", "spec.driver")),
    _R("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True, (), ("status",)),
    _R("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True, (), ()),
)
del _R

# Discovery entries for subresources whose kind differs from the parent resource.
SUBRESOURCE_KIND = {"eviction": ("policy", "v1", "Eviction"), "scale": ("autoscaling", "v1", "Scale"),
                    "binding": ("", "", "Binding"), "log": ("", "", "Pod"), "proxy": ("", "", "NodeProxyOptions")}
SUBRESOURCE_VERBS = {"status": ["get", "patch", "update"], "eviction": ["create"], "scale": ["get", "patch", "update"],
                     "binding": ["create"], "log": ["get"], "proxy": ["create", "delete", "get", "patch", "update"],
                     "finalize": ["update"]}

Route = tuple[Resource, "str | None", "str | None", "str | None"]  # resource, namespace, name, subresource


class ResourceTable:
    """The served resources, by id. Thread-safe (shares the server's lock)."""

    def __init__(self, resources: Iterable[Resource], lock: threading.RLock):
        self._lock = lock
        self._by_id: dict[str, Resource] = {r.id: r for r in resources}

    def add(self, res: Resource) -> None:
        with self._lock:
            self._by_id[res.id] = res

    def remove(self, name: str) -> None:
        with self._lock:
            del self._by_id[self.resolve(name).id]

    def all(self) -> list[Resource]:
        with self._lock:
            return list(self._by_id.values())

    def get(self, res_id: str) -> Resource | None:
        with self._lock:
            return self._by_id.get(res_id)

    def resolve(self, kind: str, api_version: str | None = None) -> Resource:
        """A resource by kind, id, plural, singular or short name (optionally within an apiVersion's group)."""
        group = None
        if api_version is not None:
            group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
        with self._lock:
            cands = list(self._by_id.values())
        for match in (
            lambda r: r.kind == kind,
            lambda r: r.id == kind,
            lambda r: r.plural == kind or r.singular_name == kind.lower(),
            lambda r: kind.lower() in r.short_names or r.kind.lower() == kind.lower(),
        ):
            found = [r for r in cands if match(r) and (group is None or r.group == group)]
            if found:
                return found[0]
        raise KeyError(f"resource not served by the fake apiserver: {kind!r} ({api_version})")

    def find(self, group: str, version: str, plural: str) -> Resource | None:
        with self._lock:
            for r in self._by_id.values():
                if r.group == group and r.version == version and r.plural == plural:
                    return r
        return None

    def route(self, path: str) -> Route | None:
        """(resource, namespace, name, subresource) for a resource path; None when not one (discovery)."""
        segs = [unquote(s) for s in path.strip("/").split("/")]
        if len(segs) >= 3 and segs[0] == "api" and segs[1] == "v1":
            group, version, rest = "", "v1", segs[2:]
        elif len(segs) >= 4 and segs[0] == "apis":
            group, version, rest = segs[1], segs[2], segs[3:]
        else:
            return None
        ns = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            inner = self.find(group, version, rest[2])
            if inner is not None and inner.namespaced:
                ns, rest = rest[1], rest[2:]
        res = self.find(group, version, rest[0])
        if res is None or len(rest) > 3 or any(s == "" for s in rest):
            raise unknown_path()
        if ns is not None and not res.namespaced:
            raise unknown_path()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if name is not None and res.namespaced and ns is None:
            raise unknown_path()
        if sub is not None and sub not in res.subresources:
            raise unknown_path()
        return res, ns, name, sub

    def serve_crd(self, crd: dict) -> None:
        """Serve the resource a newly added CRD defines, unless the table already has it."""
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        versions = [v for v in spec.get("versions") or [] if v.get("served", True)]
        if not (spec.get("group") and names.get("plural") and names.get("kind") and versions):
            return
        with self._lock:
            if f"{names['plural']}.{spec['group']}" in self._by_id:
                return
            v = next((v for v in versions if v.get("storage")), versions[0])
            subs = ("status",) if "status" in (v.get("subresources") or {}) else ()
            res = Resource(spec["group"], v["name"], names["plural"], names["kind"], spec.get("scope") != "Cluster",
                           tuple(names.get("shortNames") or ()), subs, custom=True,
                           singular=names.get("singular", ""))
            self._by_id[res.id] = res
