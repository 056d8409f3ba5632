"""Plain-HTTP helpers for the fake API server's own tests."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from kubernetes.client.rest import ApiException

KV = ("kubevirt.io", "v1", "kubevirt", "kubevirts", "kubevirt")


def raw(apiserver, method, path, body=None, content_type="application/json", headers=None):
    """(status, parsed body, response headers) for one plain HTTP request."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(apiserver.url + path, data=data, method=method, headers=headers or {})
    if data is not None:
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            text = resp.read()
            return resp.status, json.loads(text) if text.strip().startswith(b"{") else text.decode(), resp.headers
    except urllib.error.HTTPError as err:
        text = err.read()  # a Status, or the mux's plain-text 404 for an API group nobody serves
        return err.code, json.loads(text) if text.strip().startswith(b"{") else text.decode(), err.headers


def err_body(exc: ApiException) -> dict:
    return json.loads(exc.body)
