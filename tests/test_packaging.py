"""Install paths (issue 21 item 9): the krew manifest, the single-file build's archive, pipx's console scripts, and
what README.md promises about them.

The manifest is checked with krew's own rules, ported from kubernetes-sigs/krew
internal/index/validation/validate.go (ValidatePlugin, validatePlatform, validateFiles, validateSelector) and
pkg/constants (apiVersion krew.googlecontainertools.github.com/v1alpha2, kind Plugin); the version with
krew's semver (a leading `v`). The pyz itself is built and smoke-tested by CI (.ci/run: packaging/zipapp.sh,
packaging/smoke.sh): shiv installs every dependency, too slow for a unit test.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

from rblnctl import __version__

ROOT = Path(__file__).resolve().parents[1]
SAFE_NAME = re.compile(r"^[\w-]+$")
SHA256 = re.compile(r"^[a-f0-9]{64}$")
SEMVER = re.compile(r"^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")
WINDOWS_FORBIDDEN = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)), *(f"LPT{i}" for i in range(1, 10))}


def krew_errors(name: str, p: dict) -> list[str]:
    """krew's ValidatePlugin(name, p): [] when the manifest is valid, else what krew would say."""
    errs = []
    if p.get("apiVersion") != "krew.googlecontainertools.github.com/v1alpha2":
        errs.append(f"apiVersion {p.get('apiVersion')!r} not supported")
    if p.get("kind") != "Plugin":
        errs.append(f"kind {p.get('kind')!r}")
    if not SAFE_NAME.match(name) or name.upper() in WINDOWS_FORBIDDEN:
        errs.append(f"plugin name {name!r} not allowed")
    if (p.get("metadata") or {}).get("name") != name:
        errs.append("metadata.name differs from the plugin name")
    spec = p.get("spec") or {}
    short = spec.get("shortDescription") or ""
    if not short or "\n" in short or "\r" in short:
        errs.append("shortDescription empty or with a line break")
    if not spec.get("platforms"):
        errs.append("no platform")
    if not SEMVER.match(str(spec.get("version") or "")):
        errs.append(f"version {spec.get('version')!r} is not semver with a leading v")
    for pl in spec.get("platforms") or []:
        if not pl.get("uri"):
            errs.append("uri not set")
        if not SHA256.match(str(pl.get("sha256") or "")):
            errs.append("sha256 invalid")
        if not pl.get("bin"):
            errs.append("bin not set")
        files = pl.get("files")
        if files is not None and (not files or any(not f.get("from") or not f.get("to") for f in files)):
            errs.append("files invalid")
        sel = pl.get("selector")
        if not sel or (not sel.get("matchLabels") and not sel.get("matchExpressions")):
            errs.append("empty selector")
        else:
            keys = list(sel.get("matchLabels") or {}) + [e.get("key") for e in sel.get("matchExpressions") or []]
            errs += [f"selector key {k!r} not supported" for k in keys if k not in ("os", "arch")]
    return errs


@pytest.fixture
def built(tmp_path):
    """packaging/krew.py run on a stand-in pyz: (the manifest, the archive)."""
    pyz = tmp_path / "rblnctl.pyz"
    pyz.write_bytes(b"#!/usr/bin/env python3\nPK-not-really-a-zip\n")
    out = tmp_path / "dist"
    proc = subprocess.run([sys.executable, str(ROOT / "packaging" / "krew.py"), "--pyz", str(pyz), "--out",
                           str(out)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return yaml.safe_load((out / "rbln.yaml").read_text()), out / f"rblnctl-v{__version__}.tar.gz", pyz


def test_the_krew_manifest_passes_krews_validation(built):
    manifest, archive, _ = built
    assert krew_errors("rbln", manifest) == []  # file rbln.yaml, plugin `kubectl rbln`
    spec = manifest["spec"]
    assert spec["version"] == f"v{__version__}"
    (platform,) = spec["platforms"]
    assert platform["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert platform["uri"] == archive.resolve().as_uri()
    assert platform["bin"] == "kubectl-rbln" and set(platform["selector"]["matchLabels"]) == {"os", "arch"}


def test_the_archive_holds_the_plugin_krew_names(built):
    manifest, archive, pyz = built
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        plugin = tar.getmember("kubectl-rbln")
        assert plugin.mode & 0o111 and tar.extractfile(plugin).read() == pyz.read_bytes()
    (platform,) = manifest["spec"]["platforms"]
    assert {f["from"] for f in platform["files"]} <= set(names)
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == hashlib.sha256(
        _rebuild(pyz, archive.parent)).hexdigest()  # reproducible: the same pyz makes the same archive


def _rebuild(pyz: Path, out: Path) -> bytes:
    again = out / "again"
    subprocess.run([sys.executable, str(ROOT / "packaging" / "krew.py"), "--pyz", str(pyz), "--out", str(again)],
                   check=True, capture_output=True, timeout=60)
    return (again / f"rblnctl-v{__version__}.tar.gz").read_bytes()


@pytest.mark.parametrize("breakage", [
    lambda m: m["spec"].update(version=__version__),  # no leading v
    lambda m: m["spec"]["platforms"][0].update(sha256="0" * 63),
    lambda m: m["spec"]["platforms"][0]["selector"]["matchLabels"].update(distro="ubuntu"),
    lambda m: m["metadata"].update(name="rblnctl"),
    lambda m: m["spec"].update(shortDescription="two\nlines"),
])
def test_the_validator_catches_what_krew_refuses(built, breakage):
    manifest, _, _ = built
    breakage(manifest)
    assert krew_errors("rbln", manifest)


def test_pipx_gets_both_commands_from_the_console_scripts():
    """pipx puts every console script of the package on PATH: rblnctl and kubectl-rbln (kubectl's plugin name)."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["rblnctl"] == scripts["kubectl-rbln"] == "rblnctl.cli.app:main"


def test_readme_states_the_python_floor_and_the_install_paths():
    readme = (ROOT / "README.md").read_text()
    floor = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert floor == ">=3.11" and "Python >= 3.11" in readme
    assert "pipx install" in readme and "kubectl-rbln" in readme
    assert "packaging/zipapp.sh" in readme and "kubectl krew install --manifest" in readme
    first_two = [line for line in readme.split("```sh\n", 1)[1].split("```", 1)[0].splitlines() if line]
    assert first_two[0].endswith("rblnctl preflight --local") and "python -m pytest -q" in first_two[1]


def test_ci_builds_and_smoke_tests_the_single_file():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "packaging/zipapp.sh" in ci and "packaging/smoke.sh" in ci
