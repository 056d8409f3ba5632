"""Host-level code: reads (and, in vfio.py only, writes) sysfs and procfs under a configurable root."""
