"""Caches that say when they are damaged.

A folder tlgeo builds once and reads many times (a converted model, a token stream, a state pool, a
compressed model) is *sealed* when it is complete: :func:`seal` records every file's size and SHA-256
in ``.tlgeo-checksums.json``. Before its numbers are used, :func:`verify` checks them again, so a
truncated file or one changed byte is found instead of being read as valid numbers; the owner then
rebuilds the cache or refuses it in one line (:class:`CorruptFileError`).

Hashing SmolLM2's 513 MiB takes about a second, so a file is hashed again only when its status
changed since its last full check: beside the seal, ``.tlgeo-checksums.status.json`` records each
file's inode, modification time and change time (``ctime``: set by the kernel on every write, no
program can set it back), and a file whose size and status are as recorded is taken as checked.
``verify(..., full=True)`` hashes everything. The seal itself is written once: a check never
rewrites it, so a sealed folder committed to git (the model zoo) stays as committed when a fresh
clone's first check hashes it again (the status file is this machine's; git ignores it).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Iterable

from ..errors import UserError
from .files import write_json

__all__ = ["MANIFEST", "CorruptFileError", "file_digest", "seal", "verify", "check", "is_sealed"]

MANIFEST = ".tlgeo-checksums.json"
STATUS = ".tlgeo-checksums.status.json"  # {file: status} of the last check here; seals made before hold it inline


class CorruptFileError(UserError, ValueError):
    """A sealed file that is missing, of another size or of other content than when it was written."""


def file_digest(path: str | os.PathLike) -> str:
    """The SHA-256 of a file, in hex."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _status(st: os.stat_result) -> list[int]:
    return [st.st_ino, st.st_mtime_ns, st.st_ctime_ns]


def _files(folder: Path) -> list[str]:
    return sorted(
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.is_file() and not p.name.startswith(".tlgeo") and not p.name.endswith(".tmp")
    )


def seal(folder: str | os.PathLike, files: Iterable[str] | None = None) -> Path:
    """Record the size, SHA-256 and status of ``files`` (relative names; default every file under ``folder``)."""
    folder = Path(folder)
    names = _files(folder) if files is None else sorted(files)
    entries, statuses = {}, {}
    for name in names:
        p = folder / name
        digest = file_digest(p)
        st = p.stat()
        entries[name] = {"size": st.st_size, "sha256": digest}
        statuses[name] = _status(st)
    path = write_json(folder / MANIFEST, {"files": entries}, indent=1, sort_keys=True)
    _write_status(folder, statuses)
    return path


def _read_status(folder: Path, sealed: dict) -> dict:
    """The statuses of the last check (the status file; a seal that holds them inline for the rest)."""
    try:
        known = json.loads((folder / STATUS).read_text())
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict):
        known = {}
    return {name: known.get(name, want.get("status")) for name, want in sealed.items()}


def _write_status(folder: Path, statuses: dict) -> None:
    try:
        write_json(folder / STATUS, statuses, indent=1, sort_keys=True)
    except OSError:  # a read-only folder: its files are hashed again next time
        pass


def is_sealed(folder: str | os.PathLike) -> bool:
    return (Path(folder) / MANIFEST).is_file()


def verify(folder: str | os.PathLike, files: Iterable[str] | None = None, *, full: bool = False) -> list[str]:
    """What is wrong with ``folder`` against its seal: one phrase per damaged file (``states_3.npy: 1,024
    bytes, sealed with 4,096``); ``[]`` if every file (or each of ``files``) is as sealed. An unsealed
    folder, or a seal that cannot be read, is one phrase too. ``full``: hash every file, whatever its
    status."""
    folder = Path(folder)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        sealed = manifest["files"]
    except FileNotFoundError:
        return [f"{folder} has no {MANIFEST} (not sealed: written before checksums or not finished)"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return [f"{MANIFEST}: unreadable ({type(e).__name__})"]
    bad, rehashed, statuses = [], False, _read_status(folder, sealed)
    for name in sorted(sealed) if files is None else list(files):
        want = sealed.get(name)
        p = folder / name
        if want is None:
            bad.append(f"{name}: not in the seal")
            continue
        try:
            st = p.stat()
        except FileNotFoundError:
            bad.append(f"{name}: missing")
            continue
        if st.st_size != want["size"]:
            bad.append(f"{name}: {st.st_size:,} bytes, sealed with {want['size']:,}")
            continue
        if not full and statuses.get(name) == _status(st):
            continue  # not written since it was last hashed
        if file_digest(p) != want["sha256"]:
            bad.append(f"{name}: its content changed since it was sealed")
            continue
        statuses[name], rehashed = _status(st), True  # e.g. a copied folder: hashed once, then taken as checked
    if rehashed and not bad:
        _write_status(folder, statuses)
    return bad


def check(folder: str | os.PathLike, what: str, files: Iterable[str] | None = None) -> None:
    """Raise :class:`CorruptFileError` (one line: ``what``, the folder, the first damage found) unless
    :func:`verify` finds nothing wrong."""
    bad = verify(folder, files)
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise CorruptFileError(f"{what} {folder} is damaged: {bad[0]}{more}")
