"""HostRoot: the directory host commands read a host from (`/` live, or a captured or simulated tree)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rblnctl import constants as C
from rblnctl.errors import InvalidInput


@dataclass(frozen=True)
class HostRoot:
    """A host's filesystem root and the trees under it that host code reads (sys, proc, dev, run).

    Building one does no I/O; `checked()` makes sure the directory looks like a host before anything
    is read from it, so a typo never passes for "a host without NPUs".
    """

    path: Path = Path(C.HOST_ROOT)

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @classmethod
    def of(cls, root: str | Path | HostRoot) -> HostRoot:
        """A HostRoot for a path (or the HostRoot itself)."""
        return root if isinstance(root, HostRoot) else cls(Path(root))

    @property
    def sys(self) -> Path:
        """`<root>/sys`."""
        return self.path / "sys"

    @property
    def proc(self) -> Path:
        """`<root>/proc`."""
        return self.path / "proc"

    @property
    def dev(self) -> Path:
        """`<root>/dev`."""
        return self.path / "dev"

    @property
    def run(self) -> Path:
        """`<root>/run`."""
        return self.path / "run"

    @property
    def is_live(self) -> bool:
        """Whether this is the running system's own `/` (where modprobe would act on the tree it reads)."""
        return os.path.realpath(self.path) == os.path.realpath(C.HOST_ROOT)

    def under(self, absolute: str | Path) -> Path:
        """An absolute host path (`/var/lib/...`) as it lies under this root."""
        return self.path / Path(absolute).relative_to("/")

    def checked(self) -> HostRoot:
        """Return self when the directory holds a host tree; raise InvalidInput (one line) otherwise.

        A host tree is a directory with proc/ or sys/ (a capture may lack one of them); whichever of
        proc/, sys/, dev/ and run/ exists must be a directory.
        """
        try:
            if not self.path.is_dir():
                what = "does not exist" if not self.path.exists() else "is not a directory"
                raise InvalidInput(f"host root {self.path} {what}")
            for sub in ("proc", "sys", "dev", "run"):
                p = self.path / sub
                if p.exists() and not p.is_dir():
                    raise InvalidInput(f"host root {self.path} is not a host tree: {p} is not a directory")
            if not self.proc.is_dir() and not self.sys.is_dir():
                # Checking an empty or wrong directory would "find" a host with no IOMMU and no NPUs.
                raise InvalidInput(f"host root {self.path} holds neither proc/ nor sys/: "
                                   "not a host or a capture of one")
        except OSError as e:  # EACCES on the root itself, ELOOP, ENAMETOOLONG: bad input, not a crash
            raise InvalidInput(f"host root {self.path} cannot be read: {e.strerror or e}") from e
        return self
