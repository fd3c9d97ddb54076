"""Claims on cells: a ``bench run`` holds an exclusive ``flock`` on ``DIR/.claims/<digest>.lock`` while it computes a
cell, so that two runs into one folder share the work instead of computing a cell twice; the operating system
releases the claims of a process that dies. See docs/choices.md ("The result store")."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no cross-process lock; one process per folder there
    fcntl = None

CLAIMS_DIR = ".claims"


class Claims:
    """This process's claims on the cells of one run folder.

    A claim file is never deleted (a process that opened the old file would hold a lock nobody else sees); each
    holds the cell key it stands for.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder) / CLAIMS_DIR
        self._held: dict[str, int] = {}

    def path(self, key: str) -> Path:
        """The claim file of the cell ``key``."""
        return self.folder / f"{hashlib.sha1(key.encode()).hexdigest()[:20]}.lock"

    def take(self, key: str, wait: bool = False) -> bool:
        """Claim the cell ``key``: True when this process now holds it (or already did); False when another process
        holds it (``wait``: block until it is released instead)."""
        if key in self._held or fcntl is None:
            return True
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path(key), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, key.encode() + b"\n")
        self._held[key] = fd
        return True

    def release(self, key: str) -> None:
        """Give the claim on ``key`` back (nothing when not held)."""
        fd = self._held.pop(key, None)
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def release_all(self) -> None:
        """Give every claim of this process back."""
        for key in list(self._held):
            self.release(key)
