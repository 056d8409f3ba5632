"""`vm manifest --ssh-key FILE --user NAME` (issue 21 item 9): a VM someone can log into, with the cloud-init user data
`virtctl create vm --user NAME --ssh-key KEY` writes (kubevirt/kubevirt pkg/virtctl/create/vm/vm.go,
buildCloudInitConfig): the header, `user: NAME`, `ssh_authorized_keys:` and `  - KEY` per key."""

from __future__ import annotations

import json

import pytest
import yaml

from rblnctl.vm.manifest import cloud_config
from tests.helpers import cli

KEY1 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIP7GB+Lef5vCmKuA2MtxYpfDho3pXvD8oyBXU22TorP1 me@laptop"
KEY2 = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTY= ops"
OFFLINE = ("--method", "sandbox", "--resource", "rebellions.ai/RBLN-CA22_PF")  # nothing to read from a cluster


def user_data(stdout: str) -> str:
    vm = [d for d in yaml.safe_load_all(stdout) if d["kind"] == "VirtualMachine"][0]
    (vol,) = [v for v in vm["spec"]["template"]["spec"]["volumes"] if "cloudInitNoCloud" in v]
    return vol["cloudInitNoCloud"]["userData"]


def test_virtctls_cloud_config_shape():
    assert cloud_config("me", [KEY1, KEY2]) == (
        f"#cloud-config\nuser: me\nssh_authorized_keys:\n  - {KEY1}\n  - {KEY2}")
    assert cloud_config(None, [KEY1]) == f"#cloud-config\nssh_authorized_keys:\n  - {KEY1}"
    assert cloud_config(None, []) == "#cloud-config"


def test_ssh_key_file_and_user_land_in_cloud_init(tmp_path):
    pub = tmp_path / "id_ed25519.pub"
    pub.write_text(f"# my keys\n{KEY1}\n\n{KEY2}\n")
    r = cli("vm", "manifest", "my-vm", *OFFLINE, "--ssh-key", str(pub), "--user", "me")
    assert r.exit_code == 0, r.stderr
    assert user_data(r.stdout) == f"#cloud-config\nuser: me\nssh_authorized_keys:\n  - {KEY1}\n  - {KEY2}"
    assert "userData: |-\n" in r.stdout  # a block people can read in git, not an escaped one-liner
    doc = json.loads(cli("vm", "manifest", "my-vm", *OFFLINE, "--ssh-key", KEY1, "-o", "json").stdout)
    vm = doc["items"][-1]
    assert vm["spec"]["template"]["spec"]["volumes"][1]["cloudInitNoCloud"]["userData"].endswith(f"  - {KEY1}")


def test_user_after_the_subcommand_is_the_guests_not_the_kubeconfigs(tmp_path):
    """--user is also kubectl's global flag; after `vm manifest` it is the guest user (before it: kubeconfig's)."""
    r = cli("vm", "manifest", "v", *OFFLINE, "--user", "me")
    assert r.exit_code == 0, r.stderr
    assert user_data(r.stdout) == "#cloud-config\nuser: me"


@pytest.mark.parametrize("content, message", [
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn...\n-----END OPENSSH PRIVATE KEY-----\n", "private key"),
    ("# only a comment\n", "holds no SSH public key"),
    ("not-a-key at all\n", "not an OpenSSH public key"),
])
def test_a_bad_key_file_is_bad_input(tmp_path, content, message):
    f = tmp_path / "key"
    f.write_text(content)
    r = cli("vm", "manifest", "v", *OFFLINE, "--ssh-key", str(f))
    assert r.exit_code == 2 and message in r.stderr and r.stdout == ""


def test_a_missing_key_file_or_a_bad_user_is_bad_input(tmp_path):
    r = cli("vm", "manifest", "v", *OFFLINE, "--ssh-key", str(tmp_path / "nope.pub"))
    assert r.exit_code == 2 and "no such file" in r.stderr
    r = cli("vm", "manifest", "v", *OFFLINE, "--user", "Root User")
    assert r.exit_code == 2 and "malformed user name" in r.stderr


@pytest.mark.parametrize("path", ["/dev/null", "DIR"])
def test_a_key_path_that_is_no_file_is_named_so(tmp_path, path):
    """`--ssh-key ~/.ssh` or /dev/null: the path exists, so 'no such file' (as before) sent the user looking for a
    typo; it is no regular file."""
    path = str(tmp_path) if path == "DIR" else path
    r = cli("vm", "manifest", "v", *OFFLINE, "--ssh-key", path)
    assert r.exit_code == 2 and "no such file" not in r.stderr and "not a regular file" in r.stderr, r.stderr


def test_a_line_that_is_no_key_is_not_echoed(tmp_path):
    """A private key's body without its header line must not land in a CI log through the error."""
    body = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7secretsecretsecret"
    key = tmp_path / "id"
    key.write_text(body + "\n")
    r = cli("vm", "manifest", "v1", "--ssh-key", str(key))
    assert r.exit_code == 2 and "not an OpenSSH public key" in r.stderr
    assert body[:8] not in r.stderr
