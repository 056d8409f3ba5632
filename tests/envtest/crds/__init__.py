"""The real CRDs a real control plane in the suite serves, each from its source (docs/testing.md, "CRDs").

* The RBLN NPU Operator v0.3.0: RBLNClusterPolicy and RBLNDriver exactly as its chart ships them, read at run
  time from the envtest bundle (``$KUBEBUILDER_ASSETS/chart/rbln-npu-operator/crds/``, the chart of tag v0.3.0:
  RBLN-SW/rbln-npu-operator deployments/rbln-npu-operator/crds/). No validation rules; eight components
  required; unknown fields pruned.
* The later operator's RBLNClusterPolicy (``later_policy_crd``): the v0.3.0 schema with the spec-level
  ``required`` list and the four CEL rules of RBLN-SW/rbln-npu-operator config/crd/bases/
  rebellions.ai_rblnclusterpolicies.yaml at commit 02a4d9a7 (controller-gen v0.20.1), restated here, and the
  plugins' later shape (no resourceList; useGenericResourceName: api/v1beta1/device_plugin_types.go). Its
  other later fields are not modelled (the schema prunes them): rblnctl writes none of them.
* Node Feature Discovery v0.17.3 (the operator chart's dependency, ~0.17.0): NodeFeature and NodeFeatureRule,
  restated from kubernetes-sigs/node-feature-discovery deployment/base/nfd-crds/nfd-api-crds.yaml at v0.17.3
  (descriptions dropped; NodeFeatureRule's rule bodies kept free-form).
* KubeVirt v1.9.0: KubeVirt, VirtualMachine, VirtualMachineInstance, derived from its published OpenAPI by
  kubevirt_from_openapi.py (the file beside it, kubevirt-v1.9.0.json, is its output).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml

HERE = Path(__file__).parent
OPERATOR_CHART_CRDS = Path("chart") / "rbln-npu-operator" / "crds"

# RBLN-SW/rbln-npu-operator@02a4d9a7 config/crd/bases/rebellions.ai_rblnclusterpolicies.yaml, spec:
LATER_POLICY_REQUIRED = ["containerToolkit", "devicePlugin", "driver", "metricsExporter", "npuFeatureDiscovery",
                         "sandboxDevicePlugin", "vfioManager"]
LATER_POLICY_RULES = [
    {"message": "vfioManager.enabled must be true when workloadType is vm-passthrough",
     "rule": "self.workloadType != 'vm-passthrough' || self.vfioManager.enabled"},
    {"message": "either sandboxDevicePlugin.enabled or draKubeletPlugin.enabled must be true when workloadType is "
                "vm-passthrough",
     "rule": "self.workloadType != 'vm-passthrough' || self.sandboxDevicePlugin.enabled || "
             "(has(self.draKubeletPlugin) && self.draKubeletPlugin.enabled)"},
    {"message": "sandboxDevicePlugin.enabled and draKubeletPlugin.enabled are mutually exclusive: both advertise the "
                "same vfio-pci NPUs on vm-passthrough nodes",
     "rule": "!(has(self.draKubeletPlugin) && self.draKubeletPlugin.enabled && self.sandboxDevicePlugin.enabled)"},
    {"message": "devicePlugin.enabled and draKubeletPlugin.enabled are mutually exclusive: both advertise the same "
                "NPUs as rebellions.ai/npu on container nodes",
     "rule": "!(has(self.draKubeletPlugin) && self.draKubeletPlugin.enabled && self.devicePlugin.enabled)"},
]

_STR_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_NODE_FEATURE_SPEC = {  # nfd.k8s-sigs.io/v1alpha1 NodeFeatureSpec at NFD v0.17.3
    "type": "object",
    "properties": {
        "features": {"type": "object", "properties": {
            "attributes": {"type": "object", "additionalProperties": {
                "type": "object", "required": ["elements"], "properties": {"elements": _STR_MAP}}},
            "flags": {"type": "object", "additionalProperties": {
                "type": "object", "required": ["elements"], "properties": {"elements": {
                    "type": "object", "additionalProperties": {"type": "object"}}}}},
            "instances": {"type": "object", "additionalProperties": {
                "type": "object", "required": ["elements"], "properties": {"elements": {
                    "type": "array", "items": {"type": "object", "required": ["attributes"],
                                               "properties": {"attributes": _STR_MAP}}}}}},
        }},
        "labels": _STR_MAP,
    },
}


def _crd(group: str, kind: str, plural: str, scope: str, version: str, spec_schema: dict, *,
         short: list[str] | None = None, source: str) -> dict:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}", "annotations": {"rblnctl.rebellions.ai/source": source}},
        "spec": {"group": group, "scope": scope,
                 "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower(),
                           **({"shortNames": short} if short else {})},
                 "versions": [{"name": version, "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object", "required": ["spec"],
                     "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                    "metadata": {"type": "object"}, "spec": spec_schema}}}}]},
    }


def nfd_crds() -> list[dict]:
    src = "kubernetes-sigs/node-feature-discovery v0.17.3 deployment/base/nfd-crds/nfd-api-crds.yaml"
    rules = {"type": "object", "required": ["rules"], "properties": {"rules": {
        "type": "array", "items": {"type": "object", "required": ["name"],
                                   "x-kubernetes-preserve-unknown-fields": True,
                                   "properties": {"name": {"type": "string"}}}}}}
    return [_crd("nfd.k8s-sigs.io", "NodeFeature", "nodefeatures", "Namespaced", "v1alpha1", _NODE_FEATURE_SPEC,
                 source=src),
            _crd("nfd.k8s-sigs.io", "NodeFeatureRule", "nodefeaturerules", "Cluster", "v1alpha1", rules,
                 short=["nfr"], source=src)]


def kubevirt_crds() -> list[dict]:
    return json.loads((HERE / "kubevirt-v1.9.0.json").read_text())


def kubevirt_schema(kind: str) -> dict:
    """The openAPIV3Schema the real tier's KubeVirt CRD of `kind` serves (kubevirt-v1.9.0.json)."""
    crd = next(c for c in kubevirt_crds() if c["spec"]["names"]["kind"] == kind)
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def json_schema(openapi: dict) -> dict:
    """A JSON Schema (draft 2020-12) that judges an object's shape as kube-apiserver judges it against a structural
    openAPIV3Schema with strict field validation (kubectl apply's default): types, required fields, enums, patterns,
    int-or-string, nullable, and an unknown field is an error, except under x-kubernetes-preserve-unknown-fields.
    What the server does beyond the schema (defaults, CEL, admission webhooks) is not judged."""
    out: dict = {}
    for key in ("enum", "required", "pattern"):
        if key in openapi:
            out[key] = copy.deepcopy(openapi[key])
    if "type" in openapi:
        out["type"] = [openapi["type"], "null"] if openapi.get("nullable") else openapi["type"]
    if "anyOf" in openapi:
        out["anyOf"] = [json_schema(s) for s in openapi["anyOf"]]
    if "properties" in openapi:
        out["properties"] = {k: json_schema(v) for k, v in openapi["properties"].items()}
    if "items" in openapi:
        out["items"] = json_schema(openapi["items"])
    if openapi.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    if isinstance(openapi.get("additionalProperties"), dict):
        out["additionalProperties"] = json_schema(openapi["additionalProperties"])
    elif "properties" in openapi and not openapi.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def operator_crds_v030(assets: Path) -> list[dict]:
    """RBLNClusterPolicy and RBLNDriver of chart v0.3.0, from the envtest bundle; [] when it has no chart."""
    d = assets / OPERATOR_CHART_CRDS
    if not d.is_dir():
        return []
    return [yaml.safe_load(p.read_text()) for p in sorted(d.glob("*.yaml"))]


def later_policy_crd(v030_policy_crd: dict) -> dict:
    """The v0.3.0 RBLNClusterPolicy CRD with the later operator's spec rules (required list and CEL)."""
    crd = copy.deepcopy(v030_policy_crd)
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["required"] = list(LATER_POLICY_REQUIRED)
    spec["x-kubernetes-validations"] = copy.deepcopy(LATER_POLICY_RULES)
    for component in ("vfioManager", "sandboxDevicePlugin", "devicePlugin", "draKubeletPlugin"):
        spec["properties"][component]["required"] = ["enabled"]  # as there: the rules read `.enabled`
    # The later plugins take no resourceList (one resource per product; the container plugin adds the generic
    # rebellions.ai/npu unless useGenericResourceName is false): api/v1beta1/device_plugin_types.go @0edacc8b.
    for component in ("devicePlugin", "sandboxDevicePlugin"):
        spec["properties"][component]["properties"].pop("resourceList", None)
        spec["properties"][component]["properties"].pop("vfioChecker", None)
    spec["properties"]["devicePlugin"]["properties"]["useGenericResourceName"] = {"type": "boolean", "default": True}
    crd["metadata"].setdefault("annotations", {})["rblnctl.rebellions.ai/source"] = (
        "RBLN-SW/rbln-npu-operator@02a4d9a7 config/crd/bases/rebellions.ai_rblnclusterpolicies.yaml (rules)")
    return crd
