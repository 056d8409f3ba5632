"""The pod a host command runs in: pinned to one node, the node's directories read-only under /host, non-root."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rblnctl import __version__
from rblnctl import constants as C

CONTAINER = "check"
# Deleting a finished pod is immediate; one that is still running (a deadline passed, Ctrl-C) gets
# a second to exit: the commands only read, so nothing is lost by stopping them.
TERMINATION_GRACE_S = 1


def default_image() -> str:
    """The image host pods run unless --image says otherwise: HOST_POD_IMAGE_REPOSITORY at this version."""
    return f"{C.HOST_POD_IMAGE_REPOSITORY}:{__version__}"


@dataclass(frozen=True, kw_only=True)
class HostCommand:
    """A read-only rblnctl host command run in a pod: a short name, its arguments, and the host directories it reads.

    `args` follow the image's entrypoint (`rblnctl`) and read the host under HOST_POD_ROOT (/host);
    `host_paths` are relative to the node's `/`, each mounted read-only at `/host/<path>`.
    """

    name: str  # the HOST_POD_LABEL value and part of each pod's name: "preflight", "vfio-status"
    args: tuple[str, ...]
    host_paths: tuple[str, ...]


def volume_name(host_path: str) -> str:
    """`lib/modules` -> `host-lib-modules` (a DNS-1123 label, as volume names must be)."""
    return "host-" + host_path.strip("/").replace("/", "-").replace("_", "-").lower()


def pod_manifest(*, command: HostCommand, node: str, name: str, namespace: str, image: str, run_id: str,
                 timeout_s: float) -> dict[str, Any]:
    """The Pod for `command` on `node`.

    Pinned by spec.nodeName (the scheduler is bypassed, so a cordon does not keep it off), tolerating
    every taint (a NoExecute taint would evict it otherwise). Each of `command.host_paths` is a
    hostPath volume of type Directory mounted read-only: no privileged mode, no hostPID/hostNetwork,
    every capability dropped, no privilege escalation, a read-only root filesystem, non-root user
    HOST_POD_UID, no service account token. activeDeadlineSeconds makes the kubelet stop it even if
    rblnctl is killed before it can delete it.
    """
    mounts = [{"name": volume_name(p), "mountPath": f"{C.HOST_POD_ROOT}/{p.strip('/')}", "readOnly": True}
              for p in command.host_paths]
    volumes = [{"name": volume_name(p), "hostPath": {"path": "/" + p.strip("/"), "type": "Directory"}}
               for p in command.host_paths]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {C.HOST_POD_LABEL: command.name, C.HOST_POD_RUN_LABEL: run_id, C.MANAGED_BY_LABEL: C.MANAGED_BY},
            "annotations": {C.HOST_POD_NODE_ANNOTATION: node},
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "activeDeadlineSeconds": max(1, int(timeout_s)),
            "terminationGracePeriodSeconds": TERMINATION_GRACE_S,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "tolerations": [{"operator": "Exists"}],
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": C.HOST_POD_UID,
                "runAsGroup": C.HOST_POD_UID,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [{
                "name": CONTAINER,
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "args": list(command.args),
                "securityContext": {
                    "privileged": False,
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "256Mi"}},
                "volumeMounts": mounts,
            }],
            "volumes": volumes,
        },
    }
