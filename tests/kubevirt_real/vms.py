"""VirtualMachines as a user writes them for the KubeVirt tier (plain dicts: the code under test decides nothing)."""

from __future__ import annotations

from typing import Any

SANDBOX_RESOURCE = "rebellions.ai/RBLN-CA22_PF"  # what the kubevirt stack's npu-node-1 advertises (4 of them)


def vm(namespace: str, name: str, *, run_strategy: str = "Halted", host_devices: list[str] | None = None,
       memory: str = "64Mi", **spec: Any) -> dict:
    """A minimal VM (a container disk; what KubeVirt admits) with one host device per entry of `host_devices`."""
    devices: dict[str, Any] = {}
    if host_devices:
        devices["hostDevices"] = [{"name": f"npu{i}", "deviceName": d} for i, d in enumerate(host_devices)]
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"runStrategy": run_strategy, **spec,
                     "template": {"metadata": {"labels": {"kubevirt.io/vm": name}},
                                  "spec": {"domain": {"devices": devices,
                                                      "resources": {"requests": {"memory": memory}}},
                                           "volumes": [{"name": "root", "containerDisk": {
                                               "image": "quay.io/containerdisks/fedora:latest"}}]}}}}
