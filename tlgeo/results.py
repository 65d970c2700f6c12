"""Append-only result logs that survive interruption.

Each finished unit of work is one JSON line, flushed and fsynced as soon as it
is done; a rerun reads the file back and skips the keys already there, so an
interrupted run resumes with nothing lost and nothing computed twice.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

__all__ = ["ResultLog", "merge_csv"]


class ResultLog:
    """Rows keyed by a tuple of columns, stored as JSON lines at ``path``."""

    def __init__(self, path: str | os.PathLike, key: Iterable[str]):
        self.path = Path(path)
        self.key = tuple(key)
        self.rows: list[dict[str, Any]] = []
        if self.path.exists():
            with self.path.open() as f:
                for line in f:
                    line = line.strip()
                    if not line:
                        continue
                    try:
                        self.rows.append(json.loads(line))
                    except json.JSONDecodeError:  # a line cut by an interruption
                        break
            self._rewrite()  # drop a torn last line, if any

    def _key(self, row: dict[str, Any]) -> tuple:
        return tuple(json.dumps(row.get(k), sort_keys=True) for k in self.key)

    def done(self, **key: Any) -> bool:
        """Whether a row with these key values is already stored."""
        k = self._key(key)
        return any(self._key(r) == k for r in self.rows)

    def get(self, **key: Any) -> dict[str, Any] | None:
        k = self._key(key)
        return next((r for r in self.rows if self._key(r) == k), None)

    def add(self, row: dict[str, Any]) -> None:
        """Store ``row`` durably (it must hold every key column)."""
        missing = [k for k in self.key if k not in row]
        if missing:
            raise KeyError(f"row lacks key column(s) {missing}")
        if self.done(**{k: row[k] for k in self.key}):
            raise ValueError(f"row with key {[row[k] for k in self.key]} is already stored")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.rows.append(row)

    def _rewrite(self) -> None:
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        with tmp.open("w") as f:
            f.writelines(json.dumps(r) + "\n" for r in self.rows)
        os.replace(tmp, self.path)

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)


def merge_csv(path: str | os.PathLike, df: pd.DataFrame, key: Iterable[str]) -> int:
    """Merge ``df`` into the CSV at ``path`` (gzip for ``.gz``) atomically: earlier rows with the
    same ``key`` values are replaced (a rerun with the same settings), rows of other settings
    are kept. A key column the old file lacks marks its rows as other settings. Returns the
    row count."""
    path, key = Path(path), list(key)
    if path.exists():
        old = pd.read_csv(path)
        for k in key:
            if k not in old.columns and k in df.columns:
                old[k] = "(not recorded)"
        if all(k in old.columns for k in key) and all(k in df.columns for k in key):
            ids = lambda d: d[key].astype(str).agg("\x1f".join, axis=1)  # noqa: E731
            old = old[~ids(old).isin(set(ids(df)))]
            df = pd.concat([old, df], ignore_index=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    df.to_csv(tmp, index=False, compression="gzip" if path.suffix == ".gz" else None)
    os.replace(tmp, path)
    return len(df)
