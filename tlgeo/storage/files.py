"""Writes that a kill, a full disk or a second process cannot leave half done.

Every file tlgeo writes as a result goes through here:

* :func:`atomic_write` (and :func:`write_bytes`, :func:`write_text`, :func:`write_json`,
  :func:`write_csv` on it): the data goes to a temporary file in the same folder, is flushed and
  fsynced, and only then renamed over ``path`` (the folder fsynced too). A process killed at any
  moment leaves the old file or the new one, never a mixture; its temporary file is removed by the
  next write of the same file.
* :func:`append_lines`: the durable append of a resume log (one fsync per call). A write that fails
  (no space left) cuts the file back to its old length, so the log stays whole; a process killed
  mid-line leaves a torn last line, which :func:`read_lines` reports and the logs drop.

A write that runs out of space (``ENOSPC``, ``EDQUOT``) or over the file-size limit (``EFBIG``)
raises :class:`DiskFullError`: one line naming the folder, the file and the space it needed.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import io
import json
import os
import shutil
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

from ..errors import InputError, UserError

__all__ = [
    "DiskFullError",
    "atomic_write",
    "write_bytes",
    "write_text",
    "write_json",
    "write_csv",
    "append_lines",
    "read_lines",
    "human_bytes",
]

_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def human_bytes(n: float) -> str:
    """``1536`` -> ``1.5 KiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


class DiskFullError(UserError, OSError):
    """A write that found no space left (or hit the file-size limit): names the folder, the file and
    the bytes it needed; what was saved before it is intact and a rerun resumes from it."""

    def __init__(self, path: str | os.PathLike, needed: int, cause: OSError):
        path = Path(path)
        try:
            free = f"{human_bytes(shutil.disk_usage(path.parent).free)} free"
        except OSError:
            free = "free space unknown"
        what = "over the file-size limit" if cause.errno == errno.EFBIG else "no space left"
        msg = (
            f"{what} in {path.parent} writing {path.name} (needs {human_bytes(needed)} more; {free}): "
            f"free space or choose another folder, then rerun to resume"
        )
        super().__init__(cause.errno, msg)
        self.path, self.needed = path, needed

    def __str__(self) -> str:
        return self.strerror


def _write(f: IO[bytes], data: bytes) -> None:
    """Every byte tlgeo writes into a result file passes here (the one seam a fault test hooks): all of
    ``data`` into the unbuffered file ``f`` (a short write, e.g. at a size limit, is continued, so that the
    next one raises)."""
    view = memoryview(data)
    while len(view):
        view = view[f.write(view) :]


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a platform without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _tmp_of(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp")


class _Counting(io.RawIOBase):
    """A binary file whose writes go through :func:`_write`, counted (for the disk-full message)."""

    def __init__(self, f: IO[bytes]):
        self.f, self.n, self.dropped = f, 0, False

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        if self.dropped:  # the write failed: what a buffer above still holds goes nowhere
            return len(b)
        b = bytes(b)
        _write(self.f, b)
        self.n += len(b)
        return len(b)

    def flush(self) -> None:
        if not self.dropped:
            self.f.flush()


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike, mode: str = "w", *, encoding: str = "utf-8", size_hint: int | None = None
) -> Iterator[IO]:
    """``with atomic_write(path) as f: ...``: ``f`` writes a temporary file that replaces ``path`` when
    the block ends without an exception (flushed and fsynced first); on an exception ``path`` is
    untouched and the temporary file removed. ``mode``: ``"w"`` (text) or ``"wb"``. ``size_hint``: the
    bytes it will write, for :class:`DiskFullError`'s message (default: what was written before it
    failed)."""
    if mode not in ("w", "wb"):
        raise InputError(f"atomic_write mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_of(path)
    raw = open(tmp, "wb", buffering=0)
    counted = _Counting(raw)
    try:
        try:
            buffered = io.BufferedWriter(counted, 1 << 20)
            f = buffered if mode == "wb" else io.TextIOWrapper(buffered, encoding=encoding, newline="")
            yield f
            f.flush()
            f.detach()  # without closing the file below it
            if f is not buffered:
                buffered.detach()
            os.fsync(raw.fileno())
        finally:
            raw.close()
        os.replace(tmp, path)
    except OSError as e:
        counted.dropped = True
        tmp.unlink(missing_ok=True)
        if e.errno in _FULL and not isinstance(e, DiskFullError):
            raise DiskFullError(path, size_hint or max(counted.n, 1), e) from None
        raise
    except BaseException:
        counted.dropped = True
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """``data`` into ``path``, atomically (:func:`atomic_write`)."""
    with atomic_write(path, "wb", size_hint=len(data)) as f:
        f.write(data)
    return Path(path)


def write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """``text`` into ``path``, atomically."""
    return write_bytes(path, text.encode(encoding))


def write_json(path: str | os.PathLike, obj: Any, **dumps: Any) -> Path:
    """``obj`` as JSON into ``path``, atomically (``dumps``: :func:`json.dumps` options)."""
    return write_text(path, json.dumps(obj, **dumps))


def write_csv(path: str | os.PathLike, df) -> Path:
    """DataFrame ``df`` as CSV (gzip for ``.gz``, without a time stamp: the same table gives the same bytes)
    into ``path``, atomically, without its index."""
    data = df.to_csv(index=False).encode("utf-8")
    if str(path).endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    return write_bytes(path, data)


def append_lines(path: str | os.PathLike, lines: Iterable[str]) -> None:
    """Append ``lines`` (each given without its newline) to ``path`` and fsync. If the write fails
    (e.g. no space left), the file is cut back to its length before the call: a log never keeps half
    of a failed append."""
    path = Path(path)
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    if not data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab", buffering=0) as f:
        start = os.fstat(f.fileno()).st_size
        try:
            _write(f, data)
            f.flush()
            os.fsync(f.fileno())
        except OSError as e:
            with contextlib.suppress(OSError):
                f.truncate(start)
            if e.errno in _FULL:
                raise DiskFullError(path, len(data), e) from None
            raise


def read_lines(path: str | os.PathLike) -> tuple[list[str], bool]:
    """The complete lines of a log (without newlines; blank ones dropped) and whether its last line was
    torn (written without its newline by a process that was killed). A missing file has none."""
    path = Path(path)
    if not path.exists():
        return [], False
    data = path.read_bytes()
    torn = bool(data) and not data.endswith(b"\n")
    if torn:
        data = data[: data.rfind(b"\n") + 1]
    return [line for line in data.decode("utf-8", errors="replace").split("\n") if line.strip()], torn
