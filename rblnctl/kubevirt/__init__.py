"""The KubeVirt side of NPU passthrough: the KubeVirt CR (gates, permitted devices, status) and, later, VMs.

`cr` finds the CR and writes it conflict-safely; `gates` knows KubeVirt's feature gates per release;
`devices` edits permittedHostDevices; `status` summarises the CR. Import from the submodules.
"""
