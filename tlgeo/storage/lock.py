"""One writer per output folder.

A command (or an analysis's ``run`` with ``out=``) holds ``<folder>/.tlgeo.lock`` while it writes
there. A second process that wants the folder is refused at once, in one line naming the process
that holds it (:class:`FolderBusyError`). The lock is an ``flock`` on that file: the kernel lets go
of it when its process dies, so the lock of a killed process is simply taken by the next run. While
held, the file says who holds it, and a temporary file a killed writer left is removed. On release
the file is unlinked (and a folder the lock made, if nothing else was written there); a process that
locked a file already unlinked sees that the name now points elsewhere and locks again. Within one
process the lock is re-entrant: the atlas holds its folder and each step's run takes it again.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
import os
import socket
import sys
import threading
from pathlib import Path

from ..errors import UserError

__all__ = ["FolderBusyError", "FolderLock", "Hold", "folder_lock", "held_folders", "LOCK_NAME"]

LOCK_NAME = ".tlgeo.lock"


class FolderBusyError(UserError):
    """Another process is writing into the folder."""


class FolderLock:
    """The (re-entrant, per-process) lock of one folder: :meth:`acquire` / :meth:`release`, or ``with``."""

    def __init__(self, folder: Path):
        self.folder, self.path = folder, folder / LOCK_NAME
        self.count, self._fd, self.made = 0, None, []

    def acquire(self, what: str = "", wait: bool = False) -> "Hold":
        """Take the folder (``what``: the command, for the message a second writer gets), or raise
        :class:`FolderBusyError` at once if another process has it (``wait``: wait for it to let go instead, as
        a run that fills a shared cache does). Returns the :class:`Hold` to let go of (``.release()``, or
        ``with folder_lock(f).acquire(what): ...``)."""
        if self.count == 0:
            self.made = [p for p in (self.folder, *self.folder.parents) if not p.exists()]
            self.folder.mkdir(parents=True, exist_ok=True)
            while True:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = _holder(fd)
                    os.close(fd)
                    raise FolderBusyError(
                        f"{self.folder} is being written by {holder}: wait for it to finish or "
                        "choose another output folder"
                    ) from None
                except OSError as e:  # a file system without flock (some network mounts): write unguarded
                    os.close(fd)
                    _warn_unlocked(self.folder, e)
                    self.count += 1
                    return Hold(self)
                try:
                    if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                        break
                except FileNotFoundError:
                    pass
                os.close(fd)  # its holder let go and unlinked it meanwhile: lock the file there now
            owner = {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "command": (what or " ".join(["tlgeo", *sys.argv[1:]]))[:200],
                "since": _dt.datetime.now().isoformat(timespec="seconds"),
            }
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(owner).encode(), 0)
            self._fd = fd
            for tmp in self.folder.glob(".*.tmp"):  # a dead writer's half file (atomic_write's): nobody else is here
                tmp.unlink(missing_ok=True)
        self.count += 1
        return Hold(self)

    def release(self) -> None:
        """Let go once (the folder is free when every acquire has been released)."""
        if self.count == 0:
            return
        self.count -= 1
        if self.count == 0 and self._fd is not None:
            try:  # unlinked while held: whoever opened it meanwhile sees another file there and retries
                self.path.unlink(missing_ok=True)
                for folder in self.made:  # folders this lock made and nothing was written to: gone again
                    with contextlib.suppress(OSError):
                        folder.rmdir()
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> "FolderLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class Hold:
    """One acquisition of a :class:`FolderLock`: released once, by :meth:`release` or at the end of ``with``."""

    def __init__(self, lock: FolderLock):
        self.lock, self._held = lock, True

    def release(self) -> None:
        if self._held:
            self._held = False
            self.lock.release()

    def __enter__(self) -> "Hold":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


_LOCKS: dict[Path, FolderLock] = {}
_GUARD = threading.Lock()


def _forget_in_child() -> None:
    """A forked child holds none of its parent's folders: it forgets them (closing its copies of their files,
    which leaves the parent's locks as they are)."""
    for lock in _LOCKS.values():
        if lock._fd is not None:
            with contextlib.suppress(OSError):
                os.close(lock._fd)
        lock._fd, lock.count = None, 0
    _LOCKS.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def folder_lock(folder: str | os.PathLike) -> FolderLock:
    """This process's lock of ``folder`` (one object per folder: acquiring it again nests)."""
    key = Path(folder).expanduser().resolve()
    with _GUARD:
        lock = _LOCKS.get(key)
        if lock is None:
            lock = _LOCKS[key] = FolderLock(key)
    return lock


def held_folders() -> list[Path]:
    """The folders this process holds now."""
    return [p for p, lock in _LOCKS.items() if lock.count]


def _warn_unlocked(folder: Path, e: OSError) -> None:
    if folder not in _UNLOCKED:
        _UNLOCKED.add(folder)
        print(
            f"tlgeo: {folder} cannot be locked ({e.strerror or e}): a second process writing there is not refused",
            file=sys.stderr,
            flush=True,
        )


_UNLOCKED: set[Path] = set()


def _holder(fd: int) -> str:
    try:
        o = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
        return f"process {o['pid']} on {o['host']} ({o['command']}, since {o['since']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"
