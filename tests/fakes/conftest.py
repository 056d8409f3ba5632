from tests.fakes.fixtures import apiserver, kubeconfig  # noqa: F401 - pytest fixtures
