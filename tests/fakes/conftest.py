from tests.fakes.fixtures import apiserver, kubeconfig, tls_apiserver, tls_files  # noqa: F401 - pytest fixtures
