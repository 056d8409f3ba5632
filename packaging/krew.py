"""Package a single-file build for krew: the archive `kubectl krew install` unpacks, and its plugin manifest.

    python packaging/krew.py --pyz dist/rblnctl.pyz --out dist [--uri URL] [--homepage URL]

Writes OUT/rblnctl-vVERSION.tar.gz (kubectl-rbln, the pyz; README.md) and OUT/rbln.yaml, the manifest of
packaging/krew/rbln.yaml with its version, sha256, platform and uri filled in. Without --uri the manifest
names the archive by a file:// URL, for `kubectl krew install --manifest=OUT/rbln.yaml --archive=ARCHIVE`;
a release passes the URL it publishes the archive at.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import platform
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = Path(__file__).with_name("krew") / "rbln.yaml"
HOMEPAGE = "https://docs.rbln.ai"
# krew's platform selector values are Go's GOOS/GOARCH names.
ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def version() -> str:
    """`v` + rblnctl's version (krew parses the manifest version as semver with a leading v)."""
    sys.path.insert(0, str(ROOT))
    from rblnctl import __version__

    return f"v{__version__}"


def build_archive(pyz: Path, out: Path, ver: str) -> Path:
    """A reproducible tar.gz with kubectl-rbln (mode 0755) and README.md."""
    archive = out / f"rblnctl-{ver}.tar.gz"
    members = [("kubectl-rbln", pyz.read_bytes(), 0o755), ("README.md", (ROOT / "README.md").read_bytes(), 0o644)]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, mode in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    import gzip

    archive.write_bytes(gzip.compress(buf.getvalue(), mtime=0))
    return archive


def render(*, ver: str, uri: str, sha256: str, os_name: str, arch: str, homepage: str = HOMEPAGE) -> str:
    """The manifest text: the template with its placeholders filled in."""
    return TEMPLATE.read_text().format(version=ver, uri=uri, sha256=sha256, os=os_name, arch=arch,
                                       homepage=homepage)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pyz", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--uri", help="where the archive is published [default: its file:// URL]")
    ap.add_argument("--homepage", default=HOMEPAGE)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    ver = version()
    archive = build_archive(args.pyz, args.out, ver)
    machine = platform.machine().lower()
    if machine not in ARCH:
        print(f"krew.py: no krew arch name for machine {machine!r}", file=sys.stderr)
        return 1
    text = render(ver=ver, uri=args.uri or archive.resolve().as_uri(),
                  sha256=hashlib.sha256(archive.read_bytes()).hexdigest(), os_name=platform.system().lower(),
                  arch=ARCH[machine], homepage=args.homepage)
    (args.out / "rbln.yaml").write_text(text)
    print(f"{archive}\n{args.out / 'rbln.yaml'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
