"""Kubernetes access shared by every cluster command, one concern a module:

- `resources`  where things are in the API (Resource coordinates, the types rblnctl uses, name checks);
- `kubeconfig` credentials as kubectl loads them and the HTTP transport (no kubernetes import for static ones);
- `connection` a Kube from a kubeconfig, the in-cluster service account and kubectl's connection flags;
- `client`     Kube: raw JSON requests, retries of reads, paging, patches, the -v request log;
- `replies`    what an answer (or its absence) means: typed errors, transient failures, unknown outcomes;
- `optional`   a read that tolerates an absent API; the caller says what a 403 means (never "none");
- `watch`      a collection's changes as they happen, resumed and relisted as client-go's reflector does, and
               watch_until(): the one wait until what some collections show holds.

Callers import from `rblnctl.kube`; the names below are the package's interface. `--help`, `vfio` and
`preflight --local` never import this package (tests/test_startup.py).
"""

from rblnctl.kube.client import DEFAULT_PAGE_SIZE, JSON, PATCH_TYPES, Kube
from rblnctl.kube.connection import KubeOptions, connect
from rblnctl.kube.kubeconfig import resolve_kubeconfig
from rblnctl.kube.replies import describe_request, is_transient, outcome_unknown
from rblnctl.kube.resources import (
    CLUSTER_POLICIES,
    CRDS,
    DAEMONSETS,
    DEPLOYMENTS,
    DEVICE_CLASSES,
    EVENTS,
    EVENTS_V1,
    KUBEVIRTS,
    LEASES,
    NAMESPACES,
    NODE_FEATURES,
    NODES,
    PDBS,
    PODS,
    REPLICASETS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    SELF_SUBJECT_REVIEWS,
    SELF_SUBJECT_RULES_REVIEWS,
    VM_SUBRESOURCES,
    VMIS,
    VMS,
    Resource,
    parse_quantity,
    qualified_name_problem,
    validate_name,
    validate_namespace,
    validate_resource_name,
)
from rblnctl.kube import writes
from rblnctl.kube.watch import (
    SYNC,
    Change,
    Mirror,
    Watched,
    WatchEvent,
    WatchSpec,
    object_key,
    watch,
    watch_many,
    watch_until,
)

__all__ = [
    "CLUSTER_POLICIES", "CRDS", "DAEMONSETS", "DEFAULT_PAGE_SIZE", "DEPLOYMENTS", "DEVICE_CLASSES", "EVENTS",
    "EVENTS_V1", "JSON", "KUBEVIRTS", "LEASES", "NAMESPACES", "NODES", "NODE_FEATURES", "PATCH_TYPES", "PDBS",
    "PODS", "REPLICASETS", "RESOURCE_CLAIMS", "RESOURCE_CLAIM_TEMPLATES", "RESOURCE_SLICES", "SELF_SUBJECT_REVIEWS",
    "SELF_SUBJECT_RULES_REVIEWS", "SYNC", "VMIS", "VMS", "VM_SUBRESOURCES", "Change", "Kube", "KubeOptions", "Mirror",
    "Resource", "WatchEvent", "WatchSpec", "Watched", "connect", "describe_request", "is_transient", "object_key",
    "outcome_unknown", "parse_quantity", "qualified_name_problem", "resolve_kubeconfig", "validate_name",
    "validate_namespace", "validate_resource_name", "watch", "watch_many", "watch_until", "writes",
]
