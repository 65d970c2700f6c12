"""How tlgeo's files reach the disk: atomic writes and durable appends (:mod:`.files`), one writer per
output folder (:mod:`.lock`), and sealed caches whose damage is found before they are read
(:mod:`.checksums`). Layer 1: no model code."""

from .checksums import MANIFEST, CorruptFileError, check, file_digest, is_sealed, seal, verify
from .files import (
    DiskFullError,
    append_lines,
    atomic_write,
    human_bytes,
    read_lines,
    write_bytes,
    write_csv,
    write_json,
    write_text,
)
from .lock import LOCK_NAME, FolderBusyError, FolderLock, Hold, folder_lock, held_folders

__all__ = [
    "MANIFEST",
    "CorruptFileError",
    "check",
    "file_digest",
    "is_sealed",
    "seal",
    "verify",
    "DiskFullError",
    "append_lines",
    "atomic_write",
    "human_bytes",
    "read_lines",
    "write_bytes",
    "write_csv",
    "write_json",
    "write_text",
    "LOCK_NAME",
    "FolderBusyError",
    "FolderLock",
    "Hold",
    "folder_lock",
    "held_folders",
]
