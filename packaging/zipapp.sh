#!/usr/bin/env bash
# The single-file rblnctl, for hosts where pipx is not wanted: DIR/rblnctl.pyz is a zipapp built by shiv
# (rblnctl and every dependency, compiled ones included; unpacked once into ~/.shiv, or $SHIV_ROOT, on first
# run), DIR/kubectl-rbln the same file under the name kubectl runs as a plugin, and the krew archive and
# manifest (packaging/krew.py). A pyz holds compiled wheels for the Python and platform it was built on.
#
#   pip install '.[build]' && bash packaging/zipapp.sh [DIR]     # DIR: dist
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-dist}"
mkdir -p "$OUT"
if ! python -m shiv --version >/dev/null 2>&1; then
  echo "packaging/zipapp.sh: shiv is not installed: pip install '.[build]'" >&2
  exit 1
fi
python -m shiv --quiet --reproducible --compressed --console-script rblnctl --python '/usr/bin/env python3' \
  --output-file "$OUT/rblnctl.pyz" .
cp "$OUT/rblnctl.pyz" "$OUT/kubectl-rbln"
python packaging/krew.py --pyz "$OUT/rblnctl.pyz" --out "$OUT"
ls -l "$OUT"
