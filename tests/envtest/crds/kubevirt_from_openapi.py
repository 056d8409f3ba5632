"""Derive KubeVirt's CRDs (kubevirt.io/v1 KubeVirt, VirtualMachine, VirtualMachineInstance) from its OpenAPI.

    python tests/envtest/crds/kubevirt_from_openapi.py SWAGGER_JSON > tests/envtest/crds/kubevirt-v1.9.0.json

SWAGGER_JSON is kubevirt/kubevirt v1.9.0 `api/openapi-spec/swagger.json` (the published API, generated from
the Go types by openapi-gen). Each kind's definition is turned into a structural openAPIV3Schema as
kube-apiserver requires one: every `$ref` inlined, descriptions dropped (size), `int-or-string` fields as
`x-kubernetes-int-or-string`, resource.Quantity as int-or-string with its pattern, embedded ObjectMeta (a
VM's template.metadata) and RawExtension/free-form objects as `x-kubernetes-preserve-unknown-fields`, and a
type found again inside itself (none in v1.9.0's VM/VMI/KubeVirt) cut to preserve-unknown-fields. What the
server then rejects is what KubeVirt's own CRDs reject for shape and required fields (virt-operator builds
them from the same definitions: pkg/virt-operator/resource/generate/components/crds.go); KubeVirt's
admission webhooks (virt-api) are not part of it: docs/testing.md lists that difference.
"""

from __future__ import annotations

import json
import sys

KINDS = {  # kind -> (definition, plural, singular, short names, status subresource)
    "KubeVirt": ("v1.KubeVirt", "kubevirts", "kubevirt", ["kv", "kvs"]),
    "VirtualMachine": ("v1.VirtualMachine", "virtualmachines", "virtualmachine", ["vm", "vms"]),
    "VirtualMachineInstance": ("v1.VirtualMachineInstance", "virtualmachineinstances", "virtualmachineinstance",
                               ["vmi", "vmis"]),
}
QUANTITY = "k8s.io.apimachinery.pkg.api.resource.Quantity"
QUANTITY_PATTERN = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
                    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
FREE = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def convert(defs: dict, schema: dict, seen: tuple[str, ...]) -> dict:
    ref = schema.get("$ref")
    if ref:
        name = ref.rsplit("/", 1)[-1]
        if name == QUANTITY:
            return {"anyOf": [{"type": "integer"}, {"type": "string"}], "pattern": QUANTITY_PATTERN,
                    "x-kubernetes-int-or-string": True}
        if name.endswith("meta.v1.ObjectMeta") or name.endswith("runtime.RawExtension") or name in seen:
            return dict(FREE)
        if name.endswith("meta.v1.Time") or name.endswith("meta.v1.MicroTime"):
            return {"type": "string", "format": "date-time"}
        return convert(defs, defs[name], (*seen, name))
    out: dict = {}
    if schema.get("format") == "int-or-string":
        return {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
    for key in ("type", "format", "enum", "required"):  # no defaults: KubeVirt's CRDs default nothing
        if key in schema:
            out[key] = schema[key]
    if isinstance(out.get("type"), list):  # ["string", "null"]: nullable; ["string", "number"]: int-or-string
        types = [t for t in out["type"] if t != "null"]
        if "null" in out["type"]:
            out["nullable"] = True
        if len(types) > 1:
            return {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
        out["type"] = types[0]
    formats = {"integer": ("int32", "int64"), "number": ("double", "float"), "string": ("date-time", "byte", "date")}
    if out.get("format") not in formats.get(out.get("type"), ()):
        out.pop("format", None)  # openapi-gen's own formats ("uri", "byte" on an integer) mean nothing here
    if "properties" in schema:
        out["type"] = "object"
        out["properties"] = {k: convert(defs, v, seen) for k, v in schema["properties"].items()}
    if "items" in schema:
        out["items"] = convert(defs, schema["items"], seen)
    if "additionalProperties" in schema:
        ap = schema["additionalProperties"]
        out["additionalProperties"] = convert(defs, ap, seen) if isinstance(ap, dict) else ap
    if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
        return dict(FREE)
    if not out:
        return {"x-kubernetes-preserve-unknown-fields": True}
    for ext in ("x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type"):
        if ext in schema:
            out[ext] = schema[ext]
    return out


def crd(defs: dict, kind: str) -> dict:
    definition, plural, singular, short = KINDS[kind]
    schema = convert(defs, defs[definition], (definition,))
    schema["properties"]["metadata"] = {"type": "object"}  # the root's metadata: the server's own
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.kubevirt.io",
                     "annotations": {"rblnctl.rebellions.ai/derived-from":
                                     f"kubevirt/kubevirt v1.9.0 api/openapi-spec/swagger.json {definition}"}},
        "spec": {"group": "kubevirt.io", "scope": "Namespaced",
                 "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": singular,
                           "shortNames": short, "categories": ["all"] if kind != "KubeVirt" else []},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema},
                               "subresources": {"status": {}}}]},
    }


def main(path: str) -> None:
    defs = json.load(open(path))["definitions"]
    print(json.dumps([crd(defs, k) for k in KINDS], separators=(",", ":"), sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
