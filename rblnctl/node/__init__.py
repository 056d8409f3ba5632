"""Node-level operations: NPU node inventory, drain, mode switching."""
