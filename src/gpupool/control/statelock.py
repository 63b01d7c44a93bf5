"""One server per state file: an exclusive lock held for as long as ``serve`` runs.

Two servers on one state file would each schedule from their own memory and bind jobs to the
same cards. The lock is ``flock(2)`` on a file beside the state file (``state.db.lock``), which
holds the owner's pid for the message a second server prints. The kernel lets the lock go when
its holder exits, ``kill -9`` included, so a stale lock file never blocks a restart. The lock
is not on the state file itself: SQLite uses POSIX record locks on it, which a ``close()`` of
any descriptor of the file by the same process would drop.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from gpupool.core.errors import AdapterError, ConflictError


class StateLock:
    def __init__(self, state: str | Path) -> None:
        self.state = Path(state)
        self.path = self.state.with_name(self.state.name + ".lock")
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or ConflictError naming the pid that holds it."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise AdapterError(
                f"--state {self.state}: cannot create the lock file {self.path}: {exc.strerror}"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ConflictError(
                f"state file {self.state} is already served by pid {holder} "
                f"(lock {self.path}): stop that server, or give this one "
                "another --state"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        os.close(self._fd)  # the lock goes with the descriptor
        self._fd = None

    def __enter__(self) -> StateLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
