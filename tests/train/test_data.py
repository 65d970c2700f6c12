"""The training data's algorithmic source: random halves repeated (the data a model with induction heads is
trained on)."""

from __future__ import annotations

import numpy as np
import pytest

from tlgeo.train.data import (
    EOS,
    FILL,
    SEP,
    build_token_stream,
    lookback_queries,
    predecessor_queries,
    repeated_halves,
)


def _documents(stream: np.ndarray) -> list[np.ndarray]:
    ends = np.flatnonzero(stream == EOS)
    return [stream[a + 1 : b] for a, b in zip(np.r_[-1, ends[:-1]], ends)]


def test_every_document_is_a_random_half_repeated_with_varying_lengths(tmp_path):
    d = build_token_stream("repeat:4-9:3", tmp_path, max_tokens=4000, val_frac=0.05)
    train = np.fromfile(d / "train.bin", dtype=np.uint16)
    docs = _documents(train)
    assert len(docs) > 100
    for doc in docs:
        n = len(doc) // 2
        assert len(doc) == 2 * n and 4 <= n <= 9 and (doc[:n] == doc[n:]).all() and doc.max() < 256
    assert len({len(doc) for doc in docs}) == 6  # every length 4..9: no fixed offset to copy from
    again = build_token_stream("repeat:4-9:3", tmp_path / "again", max_tokens=4000, val_frac=0.05)
    assert (np.fromfile(again / "train.bin", dtype=np.uint16) == train).all()  # the seed decides it all
    other = np.concatenate(list(repeated_halves(4, 9, 4000, seed=4)))
    assert not np.array_equal(other[:100], np.concatenate(list(repeated_halves(4, 9, 4000, seed=3)))[:100])


def test_predecessor_documents_answer_each_query_with_the_token_before_it(tmp_path):
    d = build_token_stream("predecessor:4-9:3", tmp_path, max_tokens=4000, val_frac=0.05)
    docs = _documents(np.fromfile(d / "train.bin", dtype=np.uint16))
    assert len(docs) > 50
    for doc in docs:
        n = next(m for m in range(4, 10) if m + 3 * (m // 2) == len(doc))  # n tokens, then n // 2 queries
        r, queries = doc[:n], doc[n:].reshape(-1, 3)
        assert len(set(r.tolist())) == n and r.max() < 256  # distinct: each query has one earlier occurrence
        for sep, q, answer in queries:
            j = int(np.flatnonzero(r == q)[0])
            assert sep == SEP
            assert j >= 1 and answer == r[j - 1]
    assert not np.array_equal(
        np.concatenate(list(predecessor_queries(4, 9, 500, seed=1))),
        np.concatenate(list(predecessor_queries(4, 9, 500, seed=2))),
    )
    with pytest.raises(ValueError, match="2 <= shortest <= longest <= 256"):
        build_token_stream("predecessor:1-4", tmp_path / "bad", max_tokens=4000)


def test_lookback_documents_answer_each_query_after_a_filler(tmp_path):
    d = build_token_stream("lookback:4-9:3", tmp_path, max_tokens=4000, val_frac=0.05)
    docs = _documents(np.fromfile(d / "train.bin", dtype=np.uint16))
    assert len(docs) > 40
    for doc in docs:
        n = next(m for m in range(4, 10) if m + 4 * (m // 2) == len(doc))  # n tokens, then n // 2 queries
        r, queries = doc[:n], doc[n:].reshape(-1, 4)
        assert len(set(r.tolist())) == n and r.max() < FILL  # distinct, never the filler
        for sep, q, fill, answer in queries:
            j = int(np.flatnonzero(r == q)[0])
            assert sep == SEP and fill == FILL
            assert j >= 1 and answer == r[j - 1]
    assert FILL not in (SEP, EOS) and FILL < 256  # a byte id, not one of the byte tokenizer's specials
    assert not np.array_equal(
        np.concatenate(list(lookback_queries(4, 9, 500, seed=1))),
        np.concatenate(list(lookback_queries(4, 9, 500, seed=2))),
    )
    with pytest.raises(ValueError, match="2 <= shortest <= longest <= 255"):
        build_token_stream("lookback:4-256", tmp_path / "bad", max_tokens=4000)


@pytest.mark.parametrize(
    "spec, message",
    [("repeat:x", "repeat:<n>"), ("repeat:9-4", "shortest <= longest"), ("repeat:0", "shortest <= longest")],
)
def test_a_bad_repeat_source_is_named(tmp_path, spec, message):
    with pytest.raises(ValueError, match=message):
        build_token_stream(spec, tmp_path, max_tokens=4000)


def test_repeated_halves_need_the_byte_tokenizer(tmp_path):
    class Tok:
        name_or_path = "some-tokenizer"
        eos_token_id = 0

        def __len__(self):
            return 1000

    with pytest.raises(ValueError, match="--tokenizer bytes"):
        build_token_stream("repeat:8", tmp_path, max_tokens=4000, tokenizer=Tok())
