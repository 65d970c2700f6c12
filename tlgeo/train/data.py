"""A tokenised, memory-mapped token stream with a held-out validation split.

:func:`build_token_stream` tokenises local corpora (``tlgeo.data`` names or text
files), a ``datasets`` source (``hf:<name>[:<config>[:<split>]]``, streamed,
FineWeb-style; needs network) or algorithmic data (``repeat:<n>-<m>``: random halves repeated;
``predecessor:<n>-<m>``: random tokens, then queries answered by the token before; ``lookback:<n>-<m>``: the
same answered one position later, after a filler) into
``train.bin`` / ``val.bin`` (uint16 or uint32) plus ``meta.json``. Each source's last ``val_frac`` of tokens goes to
validation, so the splits never overlap. A directory already built with the same
settings is reused.

:class:`TokenStream` samples training windows deterministically from
``(seed, step)``: the data position of a run is just its step, so resuming
reproduces the batches exactly, and rank ``r`` of ``world`` takes rows
``r::world`` of the step's global batch.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import torch

from ..errors import InputError, UserError
from ..storage import is_sealed, seal, verify, write_json

__all__ = [
    "EmptyDataError",
    "build_token_stream",
    "TokenStream",
    "byte_ids",
    "repeated_halves",
    "predecessor_queries",
    "lookback_queries",
    "SEP",
    "FILL",
]

EOS = 257  # byte tokenizer's <|eos|>, written between documents


class EmptyDataError(UserError, ValueError):
    """No (or too little) text to train on."""


def _byte_lut() -> np.ndarray:
    """byte value -> id of :func:`tlgeo.models.byte_tokenizer` (its vocabulary is sorted
    ByteLevel characters, so ids are not byte values)."""
    from tokenizers import pre_tokenizers

    # GPT-2's byte -> printable-character map (the ByteLevel alphabet)
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    b2u = dict(zip(bs, map(chr, cs)))
    order = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    return np.array([order[b2u[b]] for b in range(256)], dtype=np.uint16)


_LUT: np.ndarray | None = None


def byte_ids(text: str) -> np.ndarray:
    """Ids of ``text`` under the byte tokenizer (equal to its ``encode``), uint16 ``[n]``."""
    global _LUT
    if _LUT is None:
        _LUT = _byte_lut()
    return _LUT[np.frombuffer(text.encode("utf-8"), dtype=np.uint8)]


def _texts(source: str, max_chars: int | None) -> Iterator[str]:
    """Documents of one source: a named corpus / file (one text) or a streamed hub dataset."""
    if source.startswith("hf:"):
        parts = source[3:].split(":")
        name, config = parts[0], (parts[1] or None) if len(parts) > 1 else None
        split = parts[2] if len(parts) > 2 and parts[2] else "train"
        import datasets

        n = 0
        for row in datasets.load_dataset(name, config, split=split, streaming=True):
            t = row.get("text") or ""
            yield t
            n += len(t)
            if max_chars is not None and n >= max_chars:
                return
        return
    from ..data import load_text

    yield load_text(source, max_chars=max_chars)


REPEAT_PREFIX = "repeat:"
REPEAT_TOKENS = 2_000_000  # a repeat: source's length unless --max-data-tokens caps it


def repeated_halves(shortest: int, longest: int, n_tokens: int, seed: int = 0) -> Iterator[np.ndarray]:
    """Documents ``[r_1..r_n, r_1..r_n]`` of uniformly random byte ids (0-255), ``n`` uniform in
    ``shortest..longest``, about ``n_tokens`` in all: the second half is predictable only by copying from the
    first (what induction heads do; Olsson et al. 2022), and with ``n`` varying, not by a fixed offset.
    Deterministic under ``seed``."""
    if not 1 <= shortest <= longest:
        raise InputError(f"repeat:<shortest>-<longest>: need 1 <= shortest <= longest, got {shortest}-{longest}")
    rng = np.random.default_rng(seed)
    made = 0
    while made < n_tokens:
        r = rng.integers(0, 256, int(rng.integers(shortest, longest + 1)), dtype=np.uint16)
        made += 2 * len(r) + 1
        yield np.concatenate([r, r])


PREDECESSOR_PREFIX = "predecessor:"
SEP = 256  # the byte tokenizer's <|bos|>: never inside a document, it marks a query of predecessor_queries


def predecessor_queries(shortest: int, longest: int, n_tokens: int, seed: int = 0) -> Iterator[np.ndarray]:
    """Documents ``[r_1..r_n, SEP, r_j, r_(j-1), SEP, r_k, r_(k-1), ...]``: ``n`` distinct random byte ids (``n``
    uniform in ``shortest..longest``, at least 2), then ``n // 2`` queries, each :data:`SEP` and a token of ``r`` (not
    the first) followed by the token before it there. Predicting ``r_(j-1)`` after ``SEP r_j`` takes a head that
    attends from the query to the earlier ``r_j`` and copies what a previous-token head wrote there: V-composition,
    where induction (a head reading ``r_(j+1)``) is K-composition. (Without the separator an answer, itself a token of
    ``r``, would look like a query.) About ``n_tokens`` ids in all; deterministic under ``seed``."""
    if not 2 <= shortest <= longest <= 256:
        raise InputError(
            f"predecessor:<shortest>-<longest>: need 2 <= shortest <= longest <= 256, got {shortest}-{longest}"
        )
    rng = np.random.default_rng(seed)
    made = 0
    while made < n_tokens:
        n = int(rng.integers(shortest, longest + 1))
        r = rng.choice(256, n, replace=False).astype(np.uint16)
        j = rng.integers(1, n, n // 2)
        doc = np.concatenate([r, np.stack([np.full_like(j, SEP), r[j], r[j - 1]], 1).ravel().astype(np.uint16)])
        made += len(doc) + 1
        yield doc


FILL = 255  # a byte id that lookback_queries never draws: the filler after a query, where its answer is due


def lookback_queries(shortest: int, longest: int, n_tokens: int, seed: int = 0) -> Iterator[np.ndarray]:
    """Documents ``[r_1..r_n, SEP, r_j, FILL, r_(j-1), SEP, r_k, FILL, r_(k-1), ...]``: :func:`predecessor_queries`
    with the answer one position later, after the filler :data:`FILL` (``r`` is drawn from the other 255 byte ids).
    At ``FILL`` the query ``r_j`` is one token back: a previous-token head (block 0) writes it there, and a block-1
    head queries with it for the earlier ``r_j`` (Q-composition) and copies what a previous-token head wrote
    there, ``r_(j-1)`` (V-composition). About ``n_tokens`` ids in all; deterministic under ``seed``."""
    if not 2 <= shortest <= longest <= 255:
        raise InputError(
            f"lookback:<shortest>-<longest>: need 2 <= shortest <= longest <= 255, got {shortest}-{longest}"
        )
    rng = np.random.default_rng(seed)
    made = 0
    while made < n_tokens:
        n = int(rng.integers(shortest, longest + 1))
        r = rng.choice(FILL, n, replace=False).astype(np.uint16)  # ids 0..254: never the filler
        j = rng.integers(1, n, n // 2)
        queries = np.stack([np.full_like(j, SEP), r[j], np.full_like(j, FILL), r[j - 1]], 1)
        doc = np.concatenate([r, queries.ravel().astype(np.uint16)])
        made += len(doc) + 1
        yield doc


LOOKBACK_PREFIX = "lookback:"
ALGORITHMIC_FORMAT = "predecessor-with-separator"  # in the cache key: a stream of an older generator is built anew
_ALGORITHMIC = {
    REPEAT_PREFIX: (repeated_halves, "repeated random halves", "repeat:8-32"),
    PREDECESSOR_PREFIX: (predecessor_queries, "predecessor queries", "predecessor:8-24"),
    LOOKBACK_PREFIX: (lookback_queries, "lookback queries", "lookback:4-12"),
}


def _source_ids(source: str, max_tokens: int | None, tokenizer) -> Iterator[np.ndarray]:
    """A source's documents as token ids: ``repeat:<n>[-<m>][:<seed>]`` (:func:`repeated_halves`),
    ``predecessor:<n>[-<m>][:<seed>]`` (:func:`predecessor_queries`) or ``lookback:<n>[-<m>][:<seed>]``
    (:func:`lookback_queries`), byte ids; else its texts encoded
    (:func:`_texts`)."""
    for prefix, (make, what, example) in _ALGORITHMIC.items():
        if not source.startswith(prefix):
            continue
        if tokenizer is not None:
            raise InputError(f"{source}: {what} are byte ids; train it with --tokenizer bytes")
        spec, _, seed = source[len(prefix) :].partition(":")
        lo, _, hi = spec.partition("-")
        try:
            shortest, longest, seed_ = int(lo), int(hi or lo), int(seed or 0)
        except ValueError:
            raise InputError(f"{source!r}: write {prefix}<n>[-<m>][:<seed>], e.g. {example}") from None
        yield from make(shortest, longest, max_tokens or REPEAT_TOKENS, seed_)
        return
    max_chars = None if max_tokens is None else 4 * max_tokens  # generous: tokens <= chars*4 bytes
    yield from _encode(_texts(source, max_chars), tokenizer)


def _encode(texts: Iterable[str], tokenizer) -> Iterator[np.ndarray]:
    for t in texts:
        if not t.strip():
            continue
        if tokenizer is None:
            yield byte_ids(t)
        else:
            yield np.asarray(tokenizer(t, add_special_tokens=False)["input_ids"], dtype=np.int64)


def build_token_stream(
    sources: str | list[str],
    out_dir: str | os.PathLike,
    *,
    val_frac: float = 0.01,
    max_tokens: int | None = None,
    tokenizer=None,
    min_tokens: int = 1024,
) -> Path:
    """Tokenise ``sources`` (comma-separated or a list) into ``out_dir/<key>/{train,val}.bin``.

    ``tokenizer``: ``None`` for the byte tokenizer, else an HF tokenizer;
    ``max_tokens`` caps each source. Returns the directory (reused when it exists).
    Raises :class:`EmptyDataError` when a source has fewer than ``min_tokens`` tokens.
    """
    srcs = [s.strip() for s in (sources.split(",") if isinstance(sources, str) else sources)]
    srcs = [s for s in srcs if s]
    if not srcs:
        raise EmptyDataError("no data sources given")
    tok_name = "bytes" if tokenizer is None else getattr(tokenizer, "name_or_path", type(tokenizer).__name__)
    algorithmic = [ALGORITHMIC_FORMAT] if any(s.startswith(tuple(_ALGORITHMIC)) for s in srcs) else []
    key = hashlib.sha1(json.dumps([srcs, val_frac, max_tokens, tok_name, *algorithmic]).encode()).hexdigest()[:12]
    d = Path(out_dir) / key
    if (d / "meta.json").exists():
        bad = verify(d) if is_sealed(d) else []
        if not bad:
            return d
        print(f"the token stream {d} is damaged ({bad[0]}): building it again", file=sys.stderr, flush=True)
        import shutil

        shutil.rmtree(d, ignore_errors=True)
    vocab = 258 if tokenizer is None else len(tokenizer)
    dtype = np.uint16 if vocab < 2**16 else np.uint32
    eos = EOS if tokenizer is None else tokenizer.eos_token_id
    train, val, counts = [], [], {}
    for src in srcs:
        parts: list[np.ndarray] = []
        n = 0
        for ids in _source_ids(src, max_tokens, tokenizer):
            parts.extend([ids.astype(dtype), np.array([eos], dtype=dtype)])
            n += len(ids) + 1
            if max_tokens is not None and n >= max_tokens:
                break
        ids = np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
        if max_tokens is not None:
            ids = ids[:max_tokens]
        if len(ids) < min_tokens:
            raise EmptyDataError(f"data source {src!r} gave {len(ids)} tokens; at least {min_tokens} are needed")
        n_val = max(int(len(ids) * val_frac), 1)
        train.append(ids[:-n_val])
        val.append(ids[-n_val:])
        counts[src] = {"train": len(ids) - n_val, "val": n_val}
    tmp = d.with_name(d.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    np.concatenate(train).tofile(tmp / "train.bin")
    np.concatenate(val).tofile(tmp / "val.bin")
    meta = {
        "sources": srcs,
        "val_frac": val_frac,
        "max_tokens": max_tokens,
        "tokenizer": tok_name,
        "dtype": np.dtype(dtype).name,
        "vocab_size": vocab,
        "counts": counts,
    }
    write_json(tmp / "meta.json", meta, indent=2)
    seal(tmp)  # a damaged stream is found (and built again) before it is read
    try:
        os.replace(tmp, d)
    except OSError:  # built concurrently by another process: keep theirs
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return d


class TokenStream:
    """Windows of ``seq_len + 1`` tokens from a built directory (memory-mapped).

    ``batch(step, batch_size)`` is a pure function of ``(seed, step)``;
    ``val_batches(n, batch_size)`` are fixed, evenly spaced, non-overlapping windows.
    ``bos``: when given, every window's first token is replaced by it (a model whose
    tokenizer prepends BOS then always sees BOS at position 0, in training as in use).
    """

    def __init__(self, directory: str | os.PathLike, seq_len: int, seed: int = 0, bos: int | None = None):
        self.bos = bos
        d = Path(directory)
        self.meta = json.loads((d / "meta.json").read_text())
        dt = np.dtype(self.meta["dtype"])
        self.train = np.memmap(d / "train.bin", dtype=dt, mode="r")
        self.val = np.memmap(d / "val.bin", dtype=dt, mode="r")
        self.seq_len, self.seed = seq_len, seed
        for name, arr in (("train", self.train), ("validation", self.val)):
            if len(arr) < seq_len + 2:
                raise EmptyDataError(f"the {name} split has {len(arr)} tokens, fewer than one window of {seq_len + 1}")

    @property
    def vocab_size(self) -> int:
        return int(self.meta["vocab_size"])

    def batch(self, step: int, batch_size: int, rank: int = 0, world: int = 1) -> torch.Tensor:
        """Rows ``rank::world`` of step ``step``'s global batch, int64 ``[batch_size/world, seq_len+1]``."""
        g = np.random.default_rng([self.seed, step])
        starts = g.integers(0, len(self.train) - self.seq_len - 1, size=batch_size)[rank::world]
        return self._with_bos(np.stack([self.train[s : s + self.seq_len + 1] for s in starts]))

    def _with_bos(self, windows: np.ndarray) -> torch.Tensor:
        out = torch.from_numpy(windows.astype(np.int64))
        if self.bos is not None:
            out[:, 0] = self.bos
        return out

    def val_batches(self, n: int, batch_size: int) -> list[torch.Tensor]:
        """``n`` fixed validation batches (fewer when the split is short)."""
        w = self.seq_len + 1
        n_win = min(n * batch_size, len(self.val) // w)
        stride = len(self.val) // max(n_win, 1)
        starts = [i * stride for i in range(n_win)]
        wins = [np.asarray(self.val[s : s + w]) for s in starts]
        return [self._with_bos(np.stack(wins[i : i + batch_size])) for i in range(0, n_win, batch_size)]
