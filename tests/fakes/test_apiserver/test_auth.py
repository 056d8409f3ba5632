"""Authentication and authorization: forbid(), bearer tokens, TLS, the written kubeconfig."""

from __future__ import annotations

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.fakes import objects as o
from tests.fakes.apiserver import FakeApiServer
from tests.fakes.test_apiserver.helpers import KV, err_body, raw


def test_forbid_list_nodes_matches_real_message(apiserver, core, custom):
    apiserver.forbid("list", "nodes")
    with pytest.raises(ApiException) as exc:
        core.list_node()
    assert exc.value.status == 403
    assert err_body(exc.value) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'nodes is forbidden: User "fake-user" cannot list resource "nodes" in API group "" '
                   'at the cluster scope',
        "reason": "Forbidden", "details": {"kind": "nodes"}, "code": 403}
    apiserver.add(o.node("n1"), o.kubevirt())
    assert core.read_node("n1").metadata.name == "n1"  # only list is forbidden
    apiserver.forbid("patch", "kubevirts.kubevirt.io", namespace="kubevirt")
    with pytest.raises(ApiException) as exc:
        custom.patch_namespaced_custom_object(*KV, {"spec": {}})
    body = err_body(exc.value)
    assert body["message"] == ('kubevirts.kubevirt.io "kubevirt" is forbidden: User "fake-user" cannot patch resource '
                               '"kubevirts" in API group "kubevirt.io" in the namespace "kubevirt"')
    assert body["details"] == {"name": "kubevirt", "group": "kubevirt.io", "kind": "kubevirts"}
    apiserver.allow_all()
    core.list_node()


def test_require_token_mode(apiserver, core):
    apiserver.require_token = True
    with pytest.raises(ApiException) as exc:
        core.list_node()
    assert exc.value.status == 401 and err_body(exc.value)["reason"] == "Unauthorized"
    cfg = client.Configuration(host=apiserver.url, api_key={"BearerToken": "fake-token"},
                               api_key_prefix={"BearerToken": "Bearer"})
    with client.ApiClient(cfg) as authed:
        assert client.CoreV1Api(authed).list_node().items == []


def test_bearer_scheme_is_case_insensitive(apiserver):
    # kube-apiserver lower-cases the scheme; the python client's in-cluster loader sends "bearer".
    apiserver.require_token = True
    for auth, code in (("bearer fake-token", 200), ("BEARER  fake-token", 200), ("Bearer other", 401),
                       ("Basic fake-token", 401)):
        status, _, _ = raw(apiserver, "GET", "/api/v1/nodes", headers={"Authorization": auth})
        assert status == code, auth


def test_tls_serving_with_ca_and_client_certificates(tls_files, tmp_path):
    from kubernetes import config

    with FakeApiServer(tls_cert=tls_files.cert, tls_key=tls_files.key, client_ca=tls_files.client_cert) as fake:
        assert fake.url.startswith("https://127.0.0.1:")
        path = fake.write_kubeconfig(tmp_path / "kc", ca=tls_files.cert, client_cert=tls_files.client_cert,
                                     client_key=tls_files.client_key)
        with config.new_client_from_config(config_file=str(path)) as api:
            assert client.CoreV1Api(api).list_node().items == []
        untrusted = fake.write_kubeconfig(tmp_path / "kc2")  # no CA: the handshake fails, the server lives on
        with config.new_client_from_config(config_file=str(untrusted)) as api:
            api.configuration.retries = False
            with pytest.raises(urllib3.exceptions.MaxRetryError,
                               match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
                client.CoreV1Api(api).list_node()
        with config.new_client_from_config(config_file=str(path)) as api:
            assert client.CoreV1Api(api).list_node().items == []


def test_written_kubeconfig_loads_in_the_python_client(apiserver, tmp_path):
    from kubernetes import config

    apiserver.require_token = True
    apiserver.add(o.node("n1"))
    path = apiserver.write_kubeconfig(tmp_path / "kc", context="ctx", namespace="kubevirt")
    contexts, active = config.list_kube_config_contexts(config_file=str(path))
    assert active["name"] == "ctx" and active["context"]["namespace"] == "kubevirt"
    with config.new_client_from_config(config_file=str(path)) as api:
        assert [n.metadata.name for n in client.CoreV1Api(api).list_node().items] == ["n1"]
    assert apiserver.requests[-1].headers["authorization"] == "Bearer fake-token"
