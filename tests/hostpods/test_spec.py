"""The host pod: pinned, tolerant, read-only mounts of exactly what the command reads, no privileges."""

from __future__ import annotations

from rblnctl import __version__
from rblnctl.hostpods.spec import HostCommand, default_image, pod_manifest, volume_name
from rblnctl.preflight.hosts import PREFLIGHT_LOCAL

CMD = HostCommand(name="preflight", args=("preflight", "--local", "--root", "/host", "-o", "json"),
                  host_paths=("proc", "sys", "dev", "lib/modules"))


def manifest(**kw):
    args = dict(command=CMD, node="npu-7", name="rblnctl-preflight-abcd-0", namespace="rbln-system",
                image="registry.local/rblnctl:1.0", run_id="abcd", timeout_s=90) | kw
    return pod_manifest(**args)


def test_pinned_to_the_node_and_tolerating_every_taint():
    spec = manifest()["spec"]
    assert spec["nodeName"] == "npu-7" and spec["tolerations"] == [{"operator": "Exists"}]
    assert spec["restartPolicy"] == "Never" and spec["activeDeadlineSeconds"] == 90


def test_mounts_exactly_the_host_paths_read_only_under_host():
    spec = manifest()["spec"]
    [c] = spec["containers"]
    assert [(m["mountPath"], m["readOnly"]) for m in c["volumeMounts"]] == [
        ("/host/proc", True), ("/host/sys", True), ("/host/dev", True), ("/host/lib/modules", True)]
    assert [v["hostPath"] for v in spec["volumes"]] == [
        {"path": "/proc", "type": "Directory"}, {"path": "/sys", "type": "Directory"},
        {"path": "/dev", "type": "Directory"}, {"path": "/lib/modules", "type": "Directory"}]
    assert {m["name"] for m in c["volumeMounts"]} == {v["name"] for v in spec["volumes"]}
    assert volume_name("lib/modules") == "host-lib-modules"


def test_no_privilege_of_any_kind():
    spec = manifest()["spec"]
    [c] = spec["containers"]
    for key in ("hostPID", "hostIPC", "hostNetwork", "serviceAccountName"):
        assert key not in spec
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0
    sc = c["securityContext"]
    assert sc == {"privileged": False, "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                  "capabilities": {"drop": ["ALL"]}}


def test_labels_say_who_made_it_and_which_run():
    md = manifest()["metadata"]
    assert md["labels"] == {"rebellions.ai/rblnctl.host-pod": "preflight", "rebellions.ai/rblnctl.run": "abcd",
                            "app.kubernetes.io/managed-by": "rblnctl"}
    assert md["annotations"] == {"rebellions.ai/rblnctl.node": "npu-7"}
    assert manifest()["spec"]["containers"][0]["args"] == list(CMD.args)


def test_preflight_pods_mount_what_the_host_facts_read():
    from rblnctl.preflight.host_facts import HOST_PATHS

    assert PREFLIGHT_LOCAL.host_paths == HOST_PATHS
    assert PREFLIGHT_LOCAL.args == ("preflight", "--local", "--root", "/host", "-o", "json")


def test_default_image_is_this_version():
    assert default_image() == f"docker.io/rebellions/rblnctl:{__version__}"


def test_the_dockerfile_builds_the_image_the_pods_expect():
    """The pods run as HOST_POD_UID with the image's entrypoint `rblnctl`: the Dockerfile must say the same."""
    import re
    from pathlib import Path

    from rblnctl import constants as C

    repo = Path(__file__).resolve().parents[2]
    text = (repo / "Dockerfile").read_text()
    assert re.search(rf"^USER {C.HOST_POD_UID}:{C.HOST_POD_UID}$", text, re.M)
    assert f"--uid {C.HOST_POD_UID}" in text
    assert re.search(r'^ENTRYPOINT \["rblnctl"\]$', text, re.M)
    copied = re.findall(r"^COPY (.+) \S+$", text, re.M)
    assert copied == ["pyproject.toml README.md", "rblnctl"]
    ignore = (repo / ".dockerignore").read_text().split()
    assert {"!pyproject.toml", "!README.md", "!rblnctl/"} <= set(ignore)
