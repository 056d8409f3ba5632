"""The operator's partition line: a node's partition labels, and what the `rbln-validator gate` init container waits
for (RBLN-SW/rbln-npu-operator op@74c5b08, untagged; constants PARTITION_*, GATE_*).

The admin labels a node `rebellions.ai/npu.partition=<vf1|vf4|none>` (every NPU) or
`rebellions.ai/npu.partition.<idx>=...` (one NPU); any vf1/vf4 makes the node partitioned. The partition manager
carves the PFs into VFs and writes /run/rbln/validations/partition-ready. The gate init container of the device
plugin and the DRA kubelet plugin waits for toolkit-ready and, on a partitioned node, partition-ready; the other
gated components for toolkit-ready only. A label with another value, or an index that is not a non-negative number,
keeps the gate waiting (fail-closed) until the admin fixes it (cmd/rbln-validator/gate.go runGate, nodeIsPartitioned,
componentWaitsForPartition).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rblnctl import constants as C


@dataclass(frozen=True, kw_only=True)
class PartitionState:
    """What a node's partition labels say, read as the gate reads them."""

    partitioned: bool
    invalid: tuple[str, ...] = ()  # `key=value` of each label the gate refuses

    @property
    def labelled(self) -> bool:
        return self.partitioned or bool(self.invalid)


def partition_state(labels: Mapping) -> PartitionState:
    """The node's partition state from its labels (gate.go nodeIsPartitioned)."""
    partitioned, invalid = False, []
    for key, value in sorted((str(k), str(v)) for k, v in (labels or {}).items()):
        if key != C.PARTITION_LABEL and not key.startswith(C.PARTITION_INDEX_PREFIX):
            continue
        index = key[len(C.PARTITION_INDEX_PREFIX):] if key != C.PARTITION_LABEL else "0"
        if not index.isdigit():
            invalid.append(f"{key}={value}")
        elif value in C.PARTITION_MODES:
            partitioned = True
        elif value != C.PARTITION_NONE:
            invalid.append(f"{key}={value}")
    return PartitionState(partitioned=partitioned, invalid=tuple(invalid))


def gate_component(container: Mapping) -> str | None:
    """The component an `rbln-validator gate --component <c>` init container gates (None: not a gate)."""
    argv = [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]
    if C.GATE_SUBCOMMAND not in argv:
        return None
    for i, a in enumerate(argv):
        if a == "--component" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--component="):
            return a.split("=", 1)[1]
    return None


def gate_wait(component: str, labels: Mapping | None, *, vm_node: bool) -> tuple[str, bool]:
    """(what the gate waits for, in words; whether that can ever come on this node as labelled). toolkit-ready is
    written by the operator-validator, a container-mode component, so on a vm-passthrough node it never comes."""
    toolkit = (f"{C.VALIDATIONS_DIR}/toolkit-ready, which the operator-validator writes once the container toolkit "
               "is set up (container mode only)")
    state = partition_state(labels or {})
    if state.invalid:
        return (f"the rbln-validator gate keeps waiting while the node's partition labels are invalid "
                f"({', '.join(state.invalid)}; values vf1, vf4 or none): fix the node labels"), False
    if component in C.GATE_PARTITION_WAITERS and state.partitioned:
        return (f"the rbln-validator gate waits for {toolkit}, and, the node being partitioned, for "
                f"{C.VALIDATIONS_DIR}/{C.PARTITION_READY_MARKER}, which the partition-manager writes once the VFs "
                "are made"), not vm_node
    return f"the rbln-validator gate waits for {toolkit}", not vm_node
