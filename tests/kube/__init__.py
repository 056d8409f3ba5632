"""Tests of rblnctl.kube (the Kubernetes client: requests, kubeconfig, TLS, proxies, watches, warnings)."""
