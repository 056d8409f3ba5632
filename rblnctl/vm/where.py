"""Where a VM that is not in the namespace asked for is: the not-found hint (`-n vms`), as one cheap read.

kubectl answers `Error from server (NotFound): virtualmachines.kubevirt.io "x" not found` and stops; a user with
kubectl habits who forgot `-n` then searches by hand. One cluster-wide list of VMs (and one of VMIs, a standalone
VMI being a VM to `vm diagnose`) by field selector `metadata.name=NAME` finds the namespaces that hold one: every
resource, custom resources included, serves the `metadata.name` field selector (k8s.io/apiextensions-apiserver
pkg/registry/customresource/strategy.go, objectMetaFieldsSet). A 403 on the cluster-wide list (RBAC granting only
some namespaces) means no hint, never an error: the answer the user asked for is "not found" either way.
"""

from __future__ import annotations

from rblnctl.errors import Forbidden, NotFound, RblnError
from rblnctl.kube import VMIS, VMS, Kube


def namespaces_holding(kube: Kube, name: str, *, instances: bool = False) -> list[str]:
    """The namespaces with a VirtualMachine `name` (and, with `instances`, a VirtualMachineInstance): sorted,
    [] when none or when the cluster-wide read is refused or fails."""
    found: set[str] = set()
    for res in (VMS, VMIS) if instances else (VMS,):
        try:
            objs = kube.list(res, field_selector=f"metadata.name={name}")
        except (Forbidden, NotFound):
            continue
        except RblnError:  # a hint is never worth an error of its own
            continue
        found.update(str((o.get("metadata") or {}).get("namespace") or "") for o in objs)
    return sorted(n for n in found if n)


def elsewhere(namespaces: list[str]) -> str:
    """The hint appended to a not-found message: `; it exists in namespace vms (-n vms)` ('' for none)."""
    if not namespaces:
        return ""
    if len(namespaces) == 1:
        return f"; it exists in namespace {namespaces[0]} (-n {namespaces[0]})"
    shown = ", ".join(namespaces[:5]) + (f" and {len(namespaces) - 5} more" if len(namespaces) > 5 else "")
    return f"; one of that name exists in namespaces {shown} (-n {namespaces[0]})"


def not_found(kube: Kube, name: str, namespace: str, *, kind: str = "VirtualMachine") -> NotFound:
    """kubectl's not-found words, and where a VM of that name is instead."""
    hint = elsewhere([n for n in namespaces_holding(kube, name) if n != namespace])
    return NotFound(f'{kind} "{name}" not found in namespace "{namespace}"{hint}')
