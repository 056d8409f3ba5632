"""The RBLN DRA kubelet plugin's per-node KubeVirt metadata, as a model: what makes a second VM's claim fail.

RBLN-SW/rbln-k8s-dra-driver@37a656f cmd/npu-kubelet-plugin/kubevirt_metadata.go: on Prepare of a claim with
a vfio device, the plugin writes KEP-5304 metadata for virt-launcher under a node-local directory keyed by

    resourceclaims/<claim name>                       always (direct claims are looked up there)
    resourceclaimtemplates/<pod-level claim name>     claims generated from a template (the claim's
                                                      resource.kubernetes.io/pod-claim-name annotation)

and records the owning claim's UID in a marker file; a Prepare of another claim (another UID) whose directory
is already owned fails with "metadata directory ... is owned by claim ...: another claim with the same name is
prepared on this node" (claimMetadataOwnership). Unprepare removes what a UID owns. kubevirt/kubevirt@v1.9.0
copies each VMI resourceClaims entry into the virt-launcher pod under the same name (pkg/dra/resource_claims.go
ToPodResourceClaims) and reads {base}/resourceclaimtemplates/<name>/<request>/*-metadata.json for a template
claim (pkg/dra/utils.go resolveClaimMetadata), so the pod-level name is what must be unique on a node.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field


class PrepareFailed(Exception):
    """The plugin refused to prepare a claim (kubelet reports it on the pod; the VM never starts)."""


@dataclass
class DraNode:
    """One node's metadata directories: (subdir, name) -> owning claim UID."""

    name: str
    owners: dict[tuple[str, str], str] = field(default_factory=dict)

    def prepare(self, *, uid: str, claim_name: str, pod_claim_name: str | None) -> None:
        dirs = [("resourceclaims", claim_name)]
        if pod_claim_name:
            dirs.append(("resourceclaimtemplates", pod_claim_name))
        for d in dirs:  # ownership is claimed per layout right before writing; a collision rolls back by UID
            owner = self.owners.get(d)
            if owner is not None and owner != uid:
                self.unprepare(uid)
                raise PrepareFailed(f"metadata directory {'/'.join(d)} is owned by claim {owner}: another claim "
                                    "with the same name is prepared on this node")
            self.owners[d] = uid

    def unprepare(self, uid: str) -> None:
        self.owners = {d: u for d, u in self.owners.items() if u != uid}

    def start_vmi(self, vmi_spec: Mapping, pod_name: str) -> list[str]:
        """Prepare every claim of a VMI's virt-launcher pod as kubelet would; the claim UIDs (PrepareFailed on
        a collision). Template claims get generated names <pod>-<pod claim name>-<random>, as the
        resourceclaim controller makes them."""
        uids = []
        for entry in vmi_spec.get("resourceClaims") or []:
            uid = secrets.token_hex(8)
            if entry.get("resourceClaimTemplateName"):
                self.prepare(uid=uid, claim_name=f"{pod_name}-{entry['name']}-{secrets.token_hex(3)}",
                             pod_claim_name=str(entry["name"]))
            else:
                self.prepare(uid=uid, claim_name=str(entry.get("resourceClaimName")), pod_claim_name=None)
            uids.append(uid)
        return uids
