"""Offline text corpora, read from a configurable data directory.

The data live outside the repository (see ``shared/data/README.md``): the
directory is ``$TLGEO_DATA`` when set, else ``../shared/data`` next to the
repository, else ``./shared/data`` or ``../shared/data`` relative to the current
directory. Online users can also load ``"hf:<dataset>[:<config>[:<split>]]"``
through ``datasets.load_dataset``.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

from .errors import InputError, UnknownNameError

__all__ = [
    "CORPORA",
    "DATA_ENV_VAR",
    "UnknownCorpusError",
    "data_dir",
    "corpus_path",
    "load_text",
    "load_documents",
]

DATA_ENV_VAR = "TLGEO_DATA"

# Relative to the data directory.
CORPORA: dict[str, str] = {
    "wikitext2": "wikitext2/wiki.test.raw-hfexport-crlf.txt",  # raw test split, CRLF, no blank lines
    "wikitext2-valid": "wikitext2/wiki.valid.tokens",  # word-tokenized validation split (<unk>)
    "austen": "corpora/austen.txt",
    "mobydick": "corpora/mobydick.txt",
    "bible": "corpora/bible_modern.txt",
}

# <repo root>/../shared/data, the repo root being the parent of the package directory.
_REPO_DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"


class UnknownCorpusError(UnknownNameError, ValueError):
    """A corpus name that is neither a named corpus, an ``hf:`` spec, nor a file."""


def data_dir() -> Path:
    """The offline data directory (see the module docstring for the search order)."""
    env = os.environ.get(DATA_ENV_VAR)
    if env:
        path = Path(env).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(f"${DATA_ENV_VAR}={env!r} is not a directory")
        return path
    candidates = [_REPO_DATA_DIR, Path.cwd() / "shared" / "data", Path.cwd().parent / "shared" / "data"]
    for path in candidates:
        if path.is_dir():
            return path
    raise FileNotFoundError(
        f"no offline data directory found; set ${DATA_ENV_VAR} to the folder holding "
        f"corpora/ and wikitext2/ (looked in: {', '.join(str(p) for p in candidates)})"
    )


def corpus_path(name: str) -> Path:
    """Path of the named corpus ``name`` (a key of :data:`CORPORA`)."""
    if name not in CORPORA:
        raise UnknownCorpusError(f"unknown corpus {name!r}; known corpora: {sorted(CORPORA)}")
    path = data_dir() / CORPORA[name]
    if not path.is_file():
        raise FileNotFoundError(f"corpus {name!r} is missing: {path}")
    return path


def _read_file(path: Path, max_chars: int | None) -> str:
    # Universal-newline mode turns "\r\n" and "\r" into "\n"; max_chars counts decoded chars.
    try:
        with open(path, encoding="utf-8-sig", newline=None) as f:
            return f.read() if max_chars is None else f.read(max_chars)
    except UnicodeDecodeError as e:
        raise InputError(
            f"corpus file {str(path)!r} is not UTF-8 text (byte {e.start}: {e.reason}); "
            "convert it to UTF-8 (e.g. iconv -t utf-8)"
        ) from None


def _load_hf(spec: str, max_chars: int | None) -> str:
    """``hf:<dataset>[:<config>[:<split>]]`` (split defaults to ``test``); needs network."""
    parts = spec[len("hf:") :].split(":")
    if not parts[0] or len(parts) > 3:
        raise UnknownCorpusError(f"bad hub spec {spec!r}; expected 'hf:<dataset>[:<config>[:<split>]]'")
    dataset, config, split = (
        parts[0],
        (parts[1] if len(parts) > 1 and parts[1] else None),
        (parts[2] if len(parts) > 2 and parts[2] else "test"),
    )
    import datasets

    try:
        ds = datasets.load_dataset(dataset, config, split=split)
    except (ConnectionError, OSError, datasets.exceptions.DatasetNotFoundError) as e:  # offline, or no such set
        raise UnknownCorpusError(
            f"hub corpus {spec!r} cannot be loaded ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
            f"offline, use one of the named corpora {sorted(CORPORA)} or a path to a text file"
        ) from None
    if "text" not in ds.column_names:
        raise InputError(f"{spec!r} has no 'text' column (columns: {ds.column_names})")
    text = "\n\n".join(ds["text"])
    return text if max_chars is None else text[:max_chars]


def load_text(name_or_path: str | os.PathLike, *, max_chars: int | None = None) -> str:
    """Text of a named corpus, a text file, or ``"hf:<dataset>[:<config>[:<split>]]"``.

    Line endings are normalised to ``"\\n"``; ``max_chars`` keeps only the first
    characters. Raises :class:`UnknownCorpusError` (a ``ValueError``) for an
    unknown name, ``FileNotFoundError`` for a missing file and
    ``ValueError("empty corpus ...")`` when no text is left.
    """
    if max_chars is not None and max_chars < 0:
        raise InputError(f"max_chars must be >= 0, got {max_chars}")
    name = os.fspath(name_or_path)
    if isinstance(name_or_path, str) and name in CORPORA:
        text = _read_file(corpus_path(name), max_chars)
    elif isinstance(name_or_path, str) and name.startswith("hf:"):
        text = _load_hf(name, max_chars)
    else:
        path = Path(name).expanduser()
        try:
            path.stat()
        except OSError as e:  # a name too long for a path, a folder that is a file, ...
            if e.errno not in (errno.ENOENT,):
                raise InputError(
                    f"corpus {name[:80]!r}{'...' if len(name) > 80 else ''} is not a usable path ({e.strerror})"
                ) from None
        if path.is_file():
            text = _read_file(path, max_chars)
        elif path.is_dir():
            raise InputError(f"corpus {name!r} is a directory, not a text file")
        elif isinstance(name_or_path, os.PathLike) or path.suffix or os.sep in name or name.startswith(("~", ".")):
            raise FileNotFoundError(f"corpus file {name!r} does not exist")
        else:
            raise UnknownCorpusError(
                f"unknown corpus {name!r}; known corpora: {sorted(CORPORA)}, "
                "or give a path to a text file, or 'hf:<dataset>[:<config>[:<split>]]'"
            )
    if not text.strip():
        raise InputError(f"empty corpus {name!r}: no text (max_chars={max_chars})")
    return text


def load_documents(name_or_path: str | os.PathLike, *, max_chars: int | None = None) -> list[str]:
    """:func:`load_text` split on blank lines into stripped, non-empty documents."""
    docs = [d.strip() for d in re.split(r"\n[ \t]*\n", load_text(name_or_path, max_chars=max_chars))]
    return [d for d in docs if d]
