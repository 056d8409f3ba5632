"""Tests of rblnctl/host: PCI discovery, procfs scanning and VFIO binding on a simulated kernel."""
