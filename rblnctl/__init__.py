"""rblnctl: run Rebellions RBLN NPUs inside KubeVirt VMs on Kubernetes."""

__version__ = "0.1.0"
