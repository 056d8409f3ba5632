"""Where things are in the API: Resource coordinates (group, version, plural) and the resource types rblnctl uses.

Object names are checked as Kubernetes checks them before they become URL path segments.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from urllib.parse import quote


from rblnctl import constants as C
from rblnctl.errors import (
    InvalidInput,
)


# RFC 1123 subdomain: what Kubernetes accepts as a node (and most objects') name
# (k8s.io/apimachinery pkg/util/validation IsDNS1123Subdomain).
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def validate_name(name: str, *, kind: str = "node") -> str:
    """Return `name` if Kubernetes would accept it as a `kind` name (RFC 1123 subdomain); else InvalidInput.

    Checked before any request: `./n1`, `x/../n1` or `n1?` would address an object over HTTP while
    matching nothing in field and label selectors.
    """
    if not isinstance(name, str) or len(name) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(name):
        raise InvalidInput(f"invalid {kind} name {name!r}: a {kind} name is lower-case letters, digits, '-' and '.', "
                           "starting and ending with a letter or digit (at most 253 characters)")
    return name


# RFC 1123 label: what kube-apiserver accepts as a namespace name (k8s.io/apimachinery pkg/api/validation
# generic.go: ValidateNamespaceName = NameIsDNSLabel): at most 63, no dots.
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def validate_namespace(name: str, *, what: str = "namespace") -> str:
    """Return `name` if Kubernetes would accept it as a namespace name (RFC 1123 label); else InvalidInput."""
    if not isinstance(name, str) or len(name) > 63 or not _DNS1123_LABEL.fullmatch(name):
        raise InvalidInput(f"invalid {what} name {name!r}: a namespace name is lower-case letters, digits and '-', "
                           "starting and ending with a letter or digit (at most 63 characters, no '.')")
    return name


# k8s.io/apimachinery pkg/util/validation/validation.go IsQualifiedName: [prefix/]name, the prefix a DNS-1123
# subdomain, the name at most 63 of [A-Za-z0-9] with [-A-Za-z0-9_.] inside. ASCII only: re.ASCII keeps
# full-width digits and other Unicode letters out, as Go's regexp classes do.
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", re.ASCII)
QUALIFIED_NAME_MAX = 63
_REQUESTS_PREFIX = "requests."  # kubernetes pkg/apis/core DefaultResourceRequestsPrefix
_NATIVE_DOMAIN = "kubernetes.io/"  # kubernetes pkg/apis/core ResourceDefaultNamespacePrefix


def qualified_name_problem(value: str) -> str | None:
    """Why `value` is not a qualified name as the API server judges one (IsQualifiedName); None when it is."""
    if not isinstance(value, str) or not value.isascii():
        return "must be ASCII"
    parts = value.split("/")
    if len(parts) > 2:
        return "must be a name, optionally with one DNS subdomain prefix and '/'"
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            return "the prefix before '/' must not be empty"
        if len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix):
            return (f"the prefix {prefix!r} must be a DNS subdomain: lower-case letters, digits, '-' and '.', "
                    "starting and ending with a letter or digit (at most 253 characters)")
    if not name:
        return "the name after the prefix must not be empty"
    if len(name) > QUALIFIED_NAME_MAX:
        return f"the name after the prefix must be at most {QUALIFIED_NAME_MAX} characters, not {len(name)}"
    if not _QUALIFIED_NAME.fullmatch(name):
        return (f"the name {name!r} must be letters, digits, '-', '_' and '.', starting and ending with a letter or "
                "digit")
    return None


def validate_resource_name(name: str, *, what: str = "resource name") -> str:
    """Return `name` if the API server accepts it as an extended resource name; else InvalidInput.

    kubernetes pkg/apis/core/helper/helpers.go IsExtendedResourceName: not a native resource (it has a
    domain, and not kubernetes.io), no `requests.` prefix, and `requests.` + the name is a qualified
    name (k8s.io/apimachinery IsQualifiedName). Checked before any request: a name that fails here
    would be written into the KubeVirt CR and every VM, and refused only where KubeVirt renders a pod.
    """
    problem = (qualified_name_problem(name) or qualified_name_problem(_REQUESTS_PREFIX + name)) \
        if isinstance(name, str) else "must be text"
    if isinstance(name, str) and ("/" not in name or _NATIVE_DOMAIN in name):
        problem = "must have a domain (like rebellions.ai/) that is not kubernetes.io: it names an extended resource"
    elif isinstance(name, str) and name.startswith(_REQUESTS_PREFIX):
        problem = "must not start with 'requests.'"
    if problem:
        raise InvalidInput(f"invalid {what} {name!r}: {problem}")
    return name


# k8s.io/apimachinery pkg/api/resource/quantity.go ParseQuantity: a signed decimal number, then a binary-SI suffix
# (Ki..Ei), a decimal-SI one (n, u, m, none, k, M..E) or a decimal exponent (e3, E-2). "8GB" or "1.5 Gi" are not
# quantities: the API server refuses them (and KubeVirt's CRD pattern, the same grammar).
_QUANTITY = re.compile(r"([+-]?)(\d+(?:\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?", re.ASCII)
_BINARY = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def parse_quantity(text: str, *, what: str = "quantity") -> Decimal:
    """The value of a Kubernetes quantity (`8Gi`, `512M`, `1.5e9`); InvalidInput for anything the API server refuses."""
    m = _QUANTITY.fullmatch(text.strip()) if isinstance(text, str) else None
    if m is None or text != text.strip():
        raise InvalidInput(f"invalid {what} {text!r}: a Kubernetes quantity is a number with an optional suffix, "
                           "Ki Mi Gi Ti Pi Ei (powers of 1024), k M G T P E (powers of 1000) or m, e.g. 8Gi")
    sign, number, suffix = m.group(1), Decimal(m.group(2)), m.group(3) or ""
    if suffix in _BINARY:
        value = number * _BINARY[suffix]
    elif suffix[:1] in ("e", "E"):
        value = number.scaleb(int(suffix[1:]))
    else:
        value = number.scaleb(_DECIMAL[suffix])
    return -value if sign == "-" else value


@dataclass(frozen=True)
class Resource:
    """The REST coordinates of one resource type."""

    group: str  # "" for the core group
    version: str
    plural: str
    namespaced: bool
    kind: str = ""

    def path(self, name: str | None = None, *, namespace: str | None = None, sub: str | None = None) -> str:
        """Return the URL path of the collection (no name) or of one object (and its subresource).

        Names are path segments: one that is empty, `.`/`..` or holds `/`, `?`, `#` or `%` is refused
        (InvalidInput) rather than allowed to address something else.
        """
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{_segment(namespace)}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{_segment(name)}"
            if sub:
                base += f"/{sub}"
        return base

    @property
    def qualified(self) -> str:
        """`plural.group` as the API server names it in messages (`nodes`, `kubevirts.kubevirt.io`)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


def _segment(name: str) -> str:
    if not name or name in (".", "..") or any(c in name for c in "/?#%") or name != name.strip():
        raise InvalidInput(f"invalid object name {name!r}")
    return quote(name, safe="")


NODES = Resource("", "v1", "nodes", False, "Node")
PODS = Resource("", "v1", "pods", True, "Pod")
NAMESPACES = Resource("", "v1", "namespaces", False, "Namespace")
DAEMONSETS = Resource("apps", "v1", "daemonsets", True, "DaemonSet")
DEPLOYMENTS = Resource("apps", "v1", "deployments", True, "Deployment")
REPLICASETS = Resource("apps", "v1", "replicasets", True, "ReplicaSet")
PDBS = Resource("policy", "v1", "poddisruptionbudgets", True, "PodDisruptionBudget")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", False, "CustomResourceDefinition")
KUBEVIRTS = Resource(C.KUBEVIRT_GROUP, C.KUBEVIRT_VERSION, C.KUBEVIRT_PLURAL, True, "KubeVirt")
VMS = Resource(C.KUBEVIRT_GROUP, C.KUBEVIRT_VERSION, C.VM_PLURAL, True, "VirtualMachine")
VMIS = Resource(C.KUBEVIRT_GROUP, C.KUBEVIRT_VERSION, C.VMI_PLURAL, True, "VirtualMachineInstance")
CLUSTER_POLICIES = Resource(
    C.CLUSTER_POLICY_GROUP, C.CLUSTER_POLICY_VERSION, C.CLUSTER_POLICY_PLURAL, False, "RBLNClusterPolicy"
)
NODE_FEATURES = Resource(C.NFD_GROUP, C.NFD_VERSION, C.NFD_NODEFEATURE_PLURAL, True, "NodeFeature")
DEVICE_CLASSES = Resource(C.DRA_GROUP, C.DRA_VERSION, "deviceclasses", False, "DeviceClass")
RESOURCE_SLICES = Resource(C.DRA_GROUP, C.DRA_VERSION, "resourceslices", False, "ResourceSlice")
RESOURCE_CLAIMS = Resource(C.DRA_GROUP, C.DRA_VERSION, "resourceclaims", True, "ResourceClaim")
RESOURCE_CLAIM_TEMPLATES = Resource(C.DRA_GROUP, C.DRA_VERSION, "resourceclaimtemplates", True,
                                    "ResourceClaimTemplate")
LEASES = Resource("coordination.k8s.io", "v1", "leases", True, "Lease")
SELF_SUBJECT_RULES_REVIEWS = Resource("authorization.k8s.io", "v1", "selfsubjectrulesreviews", False,
                                      "SelfSubjectRulesReview")
EVENTS = Resource("", "v1", "events", True, "Event")
EVENTS_V1 = Resource(C.EVENTS_GROUP, "v1", "events", True, "Event")  # the same objects as EVENTS, the newer shape
# kube-aggregator's APIServices: read only to name the aggregated API a failing request went to (kube/client.py).
API_SERVICES = Resource("apiregistration.k8s.io", "v1", "apiservices", False, "APIService")
SELF_SUBJECT_REVIEWS = Resource("authentication.k8s.io", "v1", "selfsubjectreviews", False, "SelfSubjectReview")
# virt-api's start/stop/restart subresources of a VirtualMachine (PUT .../virtualmachines/NAME/{start,stop,restart}).
VM_SUBRESOURCES = Resource(C.KUBEVIRT_SUBRESOURCES_GROUP, C.KUBEVIRT_VERSION, C.VM_PLURAL, True, "VirtualMachine")
