"""Append-only result logs that survive interruption, and the identity every row carries.

Each finished unit of work is one JSON line, flushed and fsynced as soon as it
is done; a rerun reads the file back and skips the keys already there, so an
interrupted run resumes with nothing lost and nothing computed twice.

A number belongs to the model that produced it: every row and every key holds the
:data:`IDENTITY` columns (the model's name, a fingerprint of its weights, their dtype, the
device class, the placement, tlgeo's version; :func:`tlgeo.runner.identity.run_identity` makes
them). A log or a CSV shared by runs of two models (or of one model in two dtypes) keeps
their rows apart, and a run reads back only its own.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import pandas as pd

from ..errors import UserError
from ..storage import append_lines, read_lines, write_csv, write_text

__all__ = [
    "IDENTITY",
    "ResultLog",
    "content_digest",
    "merge_csv",
    "row_ids",
    "wide_floats",
    "stamp",
    "of_identity",
    "note_recomputed",
    "note",
    "drop_rows",
    "read_table",
    "DamagedTableError",
    "RunState",
    "run_state",
    "current_run",
]

IDENTITY = ("model", "weights", "dtype", "device", "placement", "tlgeo_version")


@dataclasses.dataclass
class RunState:
    """What one command, or one run from Python, has done so far: the identities it ran under (``seen``), the rows
    its logs took back instead of computing (``resumed``, per log) and those computed again because what they
    measure changed (``changed``). ``command``: a ``tlgeo`` command (it records its runs' provenance itself)."""

    command: bool = False
    seen: list[dict] = dataclasses.field(default_factory=list)
    resumed: dict[Path, int] = dataclasses.field(default_factory=dict)
    changed: dict[Path, int] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)

    def lines(self) -> list[str]:
        """``resumed N rows from LOG`` for every log rows were taken back from, and ``recomputed N rows of LOG:
        ...`` for every log whose rows of the same settings measured other inputs."""
        out = [f"resumed {n} row{'s' if n != 1 else ''} from {path}" for path, n in sorted(self.resumed.items())]
        out += [
            f"recomputed {n} row{'s' if n != 1 else ''} of {path}: the rows logged there under the same settings "
            "measured other inputs (other prompts, text or token ids under the same name)"
            for path, n in sorted(self.changed.items())
        ]
        return out + list(self.notes)

    def saw(self, identity: Mapping[str, Any]) -> None:
        """A run of this command ran under ``identity`` (its provenance lists each once)."""
        if dict(identity) not in self.seen:
            self.seen.append(dict(identity))


_RUN: contextvars.ContextVar[RunState | None] = contextvars.ContextVar("tlgeo_run_state", default=None)


def current_run() -> RunState | None:
    """The state of the command or run in progress (:func:`run_state`), ``None`` outside one."""
    return _RUN.get()


@contextlib.contextmanager
def run_state(command: bool = False) -> Iterator[RunState]:
    """Inside: a fresh :class:`RunState` (what :func:`current_run` returns) collects what the work does. The command
    line opens one per command, the atlas one for its steps, an analysis run from Python one for itself."""
    token = _RUN.set(RunState(command=command))
    try:
        yield _RUN.get()
    finally:
        _RUN.reset(token)


def _count(kind: str, path: Path, n: int = 1) -> None:
    state = _RUN.get()
    if state is not None:  # outside a command or run nobody reports it
        counts = getattr(state, kind)
        counts[path] = counts.get(path, 0) + n


def stamp(df: pd.DataFrame, identity: Mapping[str, Any] | None) -> pd.DataFrame:
    """``df`` with the ``identity`` columns first (a copy; ``df`` itself if there is nothing to add)."""
    if not identity or df is None:
        return df
    if all(k in df.columns and (df[k].astype(str) == str(v)).all() for k, v in identity.items()):
        first = list(identity)
        if list(df.columns[: len(first)]) == first:
            return df
        return df[[*first, *(c for c in df.columns if c not in identity)]]  # first, as a rerun has them
    rest = df.drop(columns=[k for k in identity if k in df.columns])
    front = pd.DataFrame({k: [v] * len(df) for k, v in identity.items()}, index=df.index)
    return pd.concat([front, rest], axis=1)


def of_identity(df: pd.DataFrame, identity: Mapping[str, Any] | None) -> pd.DataFrame:
    """The rows of ``df`` (e.g. read back from a CSV) made by ``identity``; a table without the
    identity columns (written before they existed) has none."""
    if not identity:
        return df
    if any(k not in df.columns for k in identity):
        return df.iloc[:0]
    keep = pd.Series(True, index=df.index)
    for k, v in identity.items():
        keep &= df[k].astype(str) == str(v)
    return df[keep]


def note(line: str) -> None:
    """Say ``line`` with :meth:`RunState.lines` (rows removed, a table rebuilt); outside a run, a warning."""
    state = _RUN.get()
    if state is None:
        import warnings

        warnings.warn(line, stacklevel=3)
    elif line not in state.notes:
        state.notes.append(line)


def note_recomputed(path: str | os.PathLike, n: int) -> None:
    """Say (:meth:`RunState.lines`) that ``n`` rows saved in ``path`` under the same settings measured other inputs
    and were computed again (for an analysis that resumes from its tables rather than a :class:`ResultLog`)."""
    if n > 0:
        _count("changed", Path(path), n)


def content_digest(*parts: Any) -> str:
    """A 16-hex-digit SHA-256 of what a row measures: tensors and arrays (dtype, shape and values), ``str``,
    ``bytes``, numbers, ``None``, mappings, sequences and dataclasses of them. Equal content gives equal
    digests in any process; a changed token id, prompt or answer gives another."""
    h = hashlib.sha256()
    _feed(h, parts)
    return h.hexdigest()[:16]


def _feed(h, x: Any) -> None:
    import numpy as np

    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor
        x = x.detach().cpu().numpy()
    if isinstance(x, np.ndarray):
        a = np.ascontiguousarray(x)
        h.update(f"a{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    elif isinstance(x, (bytes, bytearray)):
        h.update(b"b%d:" % len(x) + bytes(x))
    elif isinstance(x, str):
        b = x.encode("utf-8")
        h.update(b"s%d:" % len(b) + b)
    elif x is None or isinstance(x, (bool, int, float, np.integer, np.floating)):
        h.update(f"n{x!r};".encode())
    elif isinstance(x, Mapping):
        h.update(b"m%d:" % len(x))
        for k in sorted(x, key=str):
            _feed(h, str(k))
            _feed(h, x[k])
    elif isinstance(x, (list, tuple)):
        h.update(b"l%d:" % len(x))
        for v in x:
            _feed(h, v)
    elif dataclasses.is_dataclass(x) and not isinstance(x, type):
        _feed(h, {f.name: getattr(x, f.name) for f in dataclasses.fields(x)})
    else:
        raise TypeError(f"content_digest: cannot digest a {type(x).__name__}")


class ResultLog:
    """Rows keyed by a tuple of columns, stored as JSON lines at ``path`` (looked up by key in O(1)).

    ``identity``: the :data:`IDENTITY` columns of the model whose rows these are, passed by the run (``None`` or
    ``{}``: none, e.g. rows of several models read on purpose; never an ambient one). They join the key and every
    row stored; rows of other identities in the same file stay there untouched, and :attr:`rows`, :meth:`get`,
    :meth:`done` and :meth:`frame` see only this identity's. :attr:`resumed` counts the rows a
    run took back instead of computing them (:meth:`RunState.lines` says so).

    ``content``: the key columns that hold a digest of what a row measures (:func:`content_digest` of a
    task's token ids, a text's bytes, a prompt set). A row logged under the same settings with another
    digest is not taken back: its unit is computed again, counted in :attr:`changed` and said by
    :meth:`RunState.lines`."""

    def __init__(
        self,
        path: str | os.PathLike,
        key: Iterable[str],
        *,
        identity: Mapping[str, Any] | None = None,
        content: Iterable[str] = (),
    ):
        self.path = Path(path)
        self.identity = dict(identity or {})
        self.key = tuple(dict.fromkeys([*self.identity, *key]))
        self.content = tuple(content)
        unknown = [c for c in self.content if c not in self.key]
        if unknown:
            raise ValueError(f"content column(s) {unknown} are not key columns of {self.path.name}")
        self._settings = tuple(k for k in self.key if k not in self.content)  # the key less the content digests
        self._measured: dict[tuple, set] = {}  # settings -> the content keys logged under them
        self.changed = 0
        self._all: list[dict[str, Any]] = []
        self._index: dict[tuple, dict[str, Any]] = {}
        self._taken: set[tuple] = set()
        self.resumed = 0
        lines, torn = read_lines(self.path)
        for line in lines:
            try:
                self._all.append(json.loads(line))
            except json.JSONDecodeError:  # a line damaged on disk: its unit is computed again
                torn = True
        if torn:
            self._rewrite()  # drop the torn or damaged line(s)
        mine = json.loads(json.dumps(self.identity))
        self.rows: list[dict[str, Any]] = [r for r in self._all if all(r.get(k) == v for k, v in mine.items())]
        for r in self.rows:
            self._index.setdefault(self._key(r), r)  # the first row of a key, as before
            self._note_measured(self._key(r))

    def _key(self, row: dict[str, Any]) -> tuple:
        return tuple(json.dumps(row.get(k), sort_keys=True) for k in self.key)

    def _note_measured(self, k: tuple) -> None:
        if self.content:
            self._measured.setdefault(self._settings_of(k), set()).add(k)

    def _settings_of(self, k: tuple) -> tuple:
        return tuple(v for name, v in zip(self.key, k) if name not in self.content)

    def _lookup(self, key: dict[str, Any]) -> dict[str, Any] | None:
        k = self._key({**key, **self.identity})
        row = self._index.get(k)
        if row is not None and k not in self._taken:
            self._taken.add(k)
            self.resumed += 1
            _count("resumed", self.path)
        elif row is None and k not in self._taken and self._measured.get(self._settings_of(k), set()) - {k}:
            self._taken.add(k)  # said once: the same settings were logged with other inputs
            self.changed += 1
            _count("changed", self.path)
        return row

    def done(self, **key: Any) -> bool:
        """Whether a row of this identity with these key values is already stored."""
        return self._lookup(key) is not None

    def get(self, **key: Any) -> dict[str, Any] | None:
        """The stored row of this identity with these key values, or ``None``."""
        return self._lookup(key)

    def add(self, row: dict[str, Any]) -> None:
        """Store ``row`` durably (it must hold every key column; the identity columns are added).

        ``row`` itself becomes what a rerun reads back (the identity columns first, then its values
        through JSON: tuples as lists, numpy floats as floats), so that a table of freshly computed
        rows and one of resumed rows are equal value for value."""
        self.extend([row])

    def extend(self, rows: Iterable[dict[str, Any]]) -> None:
        """Store ``rows`` durably, with one flush to disk (each must hold every key column, and none be stored);
        each row becomes what a rerun reads back, as in :meth:`add`."""
        given = list(rows)
        lines = [json.dumps({**self.identity, **row, **self.identity}) for row in given]  # identity first, kept
        rows = [json.loads(line) for line in lines]
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
        append_lines(self.path, lines)
        for k, row, stored in zip(keys, given, rows):
            row.clear()
            row.update(stored)
            self._all.append(row)
            self.rows.append(row)
            self._index[k] = row
            self._taken.add(k)
            self._note_measured(k)

    def _rewrite(self) -> None:
        write_text(self.path, "".join(json.dumps(r) + "\n" for r in self._all))

    def frame(self) -> pd.DataFrame:
        """This identity's rows."""
        return pd.DataFrame(self.rows)


class DamagedTableError(UserError, ValueError):
    """A results table that does not read as the table tlgeo wrote (damaged on disk, or edited)."""


def _table_text(path: Path) -> tuple[str, str]:
    """A table file's text (gunzipped for ``.gz``) as far as it reads, and what is wrong with it (``""``: nothing)."""
    data = path.read_bytes()
    problem = ""
    if path.name.endswith(".gz"):
        import zlib

        unzip = zlib.decompressobj(wbits=31)
        try:
            raw = unzip.decompress(data)
            if not unzip.eof:
                problem = "its compressed data ends early"
        except zlib.error:
            raw, problem = b"", "its compressed data does not decompress"
        data = raw
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        text = data[: e.start].decode("utf-8")
        problem = problem or f"byte {e.start} is not UTF-8"
    return text, problem


def _as_written(text: str) -> bool:
    """Whether ``text`` is what :func:`tlgeo.storage.write_csv` writes of the table it holds (read as text)."""
    import io

    try:
        df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError):
        return False
    return df.to_csv(index=False) == text


def read_table(path: str | os.PathLike, *, as_text: bool = False) -> pd.DataFrame:
    """A results table tlgeo wrote (gzip for ``.gz``), checked: it must read as the CSV tlgeo writes. A table cut
    short (a last line without its newline, compressed data that ends early) gives its complete rows, and the run
    says so (:func:`note`): the rows of a rerun's settings are made again from its logs, and whoever saves the
    table writes it whole again. Any other damage raises :class:`DamagedTableError` naming the file.
    ``as_text``: every value as its text, as written."""
    import io

    path = Path(path)
    text, problem = _table_text(path)
    cut = problem != "" or not text.endswith("\n")
    if cut:  # keep the complete lines; a file cut inside its header keeps nothing
        text = text[: text.rfind("\n") + 1]
    if text.strip() and not _as_written(text):  # (a table of no columns is written as one empty line)
        raise DamagedTableError(
            f"{path} does not read as the table tlgeo wrote (damaged or edited): move it away "
            "or delete it, and rerun: its rows are made again from the run's logs"
        )
    if cut:
        lost = "its header" if not text else "its last row"
        note(
            f"{path} was cut short ({problem or 'its last line has no end'}: a damaged file): {lost} dropped, "
            "its complete rows kept; the rows this run makes are written whole again"
        )
    if not text.strip():
        return pd.DataFrame()
    if as_text:
        return pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    return pd.read_csv(io.StringIO(text))


def drop_rows(path: str | os.PathLike, key: Iterable[str], ids: Iterable[str]) -> pd.DataFrame:
    """Remove from the table at ``path`` the rows whose ``key`` values (:func:`row_ids`, as text) are among ``ids``
    (rows a rerun found stale); the rest of the file keeps its bytes. Returns the rows removed (values as text;
    none where the file or a key column is missing)."""
    path, key, ids = Path(path), list(key), set(ids)
    if not ids or not path.exists():
        return pd.DataFrame()
    old = read_table(path, as_text=True)
    if old.empty or any(k not in old.columns for k in key):
        return pd.DataFrame()
    gone = row_ids(old, key).isin(ids)
    if gone.any():
        write_csv(path, old[~gone])
    return old[gone]


def merge_csv(
    path: str | os.PathLike,
    df: pd.DataFrame,
    key: Iterable[str],
    whole: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
) -> int:
    """Merge ``df`` into the CSV at ``path`` (gzip for ``.gz``) atomically: earlier rows with the
    same ``key`` values are replaced (a rerun with the same settings), rows of other settings
    are kept. A key column the old file lacks marks its rows as other settings. An earlier table that does not
    read as tlgeo wrote it is never merged (:func:`read_table`: cut short, its complete rows are; else refused).
    ``whole(merged) -> merged``: columns computed again over the whole merged table before it is written.
    Returns the row count."""
    path, key = Path(path), list(key)
    if path.exists():
        old = read_table(path)
        for k in key:
            if k not in old.columns and k in df.columns:
                old[k] = "(not recorded)"
        if all(k in old.columns for k in key) and all(k in df.columns for k in key):
            old = old[~row_ids(old, key).isin(set(row_ids(df, key)))]
            df = pd.concat([old, df], ignore_index=True) if len(old) else df
    if whole is not None:
        df = whole(df)
    write_csv(path, wide_floats(df))
    return len(df)


def wide_floats(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its float16 / float32 columns as float64 (a copy if any; ``df`` itself otherwise): the
    numbers a rerun reads back from a log or a CSV, so that a fresh table and a resumed one are written alike."""
    narrow = [c for c, t in df.dtypes.items() if t in ("float16", "float32")]
    return df.astype({c: "float64" for c in narrow}) if narrow else df


def row_ids(df: pd.DataFrame, key: Iterable[str]) -> pd.Series:
    """Each row's ``key`` values (``str`` of each, missing ones included) as one string, column by column
    (a row-wise join costs ~0.1 ms a row)."""
    key = list(key)
    text = [df[k].map(str).astype(object) for k in key]  # object: an empty column maps to float64
    ids = text[0]
    for t in text[1:]:
        ids = ids + "\x1f" + t
    return ids
