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
    """Rows keyed by a tuple of columns, stored as JSON lines at ``path`` (looked up by key in O(1))."""

    def __init__(self, path: str | os.PathLike, key: Iterable[str]):
        self.path = Path(path)
        self.key = tuple(key)
        self.rows: list[dict[str, Any]] = []
        self._index: dict[tuple, dict[str, Any]] = {}
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
        for r in self.rows:
            self._index.setdefault(self._key(r), r)  # the first row of a key, as before

    def _key(self, row: dict[str, Any]) -> tuple:
        return tuple(json.dumps(row.get(k), sort_keys=True) for k in self.key)

    def done(self, **key: Any) -> bool:
        """Whether a row with these key values is already stored."""
        return self._key(key) in self._index

    def get(self, **key: Any) -> dict[str, Any] | None:
        return self._index.get(self._key(key))

    def add(self, row: dict[str, Any]) -> None:
        """Store ``row`` durably (it must hold every key column)."""
        self.extend([row])

    def extend(self, rows: Iterable[dict[str, Any]]) -> None:
        """Store ``rows`` durably, with one flush to disk (each must hold every key column, and none be stored)."""
        rows = list(rows)
        keys = []
        for row in rows:
            missing = [k for k in self.key if k not in row]
            if missing:
                raise KeyError(f"row lacks key column(s) {missing}")
            k = self._key(row)
            if k in self._index or k in keys:
                raise ValueError(f"row with key {[row[c] for c in self.key]} is already stored")
            keys.append(k)
        if not rows:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
            f.flush()
            os.fsync(f.fileno())
        for k, row in zip(keys, rows):
            self.rows.append(row)
            self._index[k] = row

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
