"""Run rblnctl from another checkout: ``python benchmarks/_tree.py TREE ARGS...`` (fleet.py's --also).

PYTHONPATH alone does not do it when this interpreter has rblnctl installed in editable mode: setuptools' editable
finder sits on sys.meta_path ahead of the path finder and maps `rblnctl` to this checkout whatever sys.path says.
The finder is taken off, TREE put first on sys.path, and rblnctl run as `python -m rblnctl` would run it.
"""

from __future__ import annotations

import runpy
import sys

if __name__ == "__main__":
    tree = sys.argv.pop(1)
    sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
    sys.path.insert(0, tree)
    sys.argv[0] = "rblnctl"
    runpy.run_module("rblnctl", run_name="__main__", alter_sys=True)
