"""Universal Dependencies English EWT: words with their part of speech and syntactic depth.

Read from ``<data>/ud_ewt/en_ewt-ud-{dev,test}.conllu`` (``../shared/data``,
offline) with the ``conllu`` parser. Multiword-token ranges and empty nodes are
skipped: the words are the syntactic words of the basic tree. A word's depth is
its distance to the root along the heads (the root has depth 0).

:func:`first_subtokens` aligns the words to a model's tokens: the index of the
first token of each word in ``model.to_tokens(text)`` (BOS included where the
model prepends one), from the tokenizer's character offsets.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..errors import InputError

__all__ = ["SPLITS", "TreebankSentence", "load_treebank", "tree_depths", "first_subtokens"]

SPLITS = {"dev": "en_ewt-ud-dev.conllu", "test": "en_ewt-ud-test.conllu"}


@dataclass(frozen=True)
class TreebankSentence:
    """One sentence: its surface ``text`` and, per word, form, UPOS tag, head (0: root) and depth."""

    sent_id: str
    text: str
    words: tuple[str, ...]
    upos: tuple[str, ...]
    heads: tuple[int, ...]
    depths: tuple[int, ...]


def tree_depths(heads: Sequence[int]) -> list[int]:
    """Distance of each word to the root; ``heads[i]`` is word ``i + 1``'s head (0: the root).

    Raises ``ValueError`` on a head out of range or a cycle."""
    n = len(heads)
    depth: list[int | None] = [None] * n
    for i in range(n):
        path, j = [], i
        while depth[j] is None:
            h = heads[j]
            if not 0 <= h <= n:
                raise InputError(f"word {j + 1} has head {h}, outside 0..{n}")
            if j in path:
                raise InputError(f"the heads form a cycle through word {j + 1}")
            path.append(j)
            if h == 0:
                depth[j] = 0
                break
            j = h - 1
        base = depth[j]
        for k in reversed(path):
            if depth[k] is None:
                base += 1
                depth[k] = base
            else:
                base = depth[k]
    return [int(d) for d in depth]


def _path(split: str) -> Path:
    from ..data import data_dir

    if split not in SPLITS:
        raise InputError(f"unknown treebank split {split!r}; choose from {sorted(SPLITS)}")
    path = data_dir() / "ud_ewt" / SPLITS[split]
    if not path.is_file():
        raise FileNotFoundError(f"UD English EWT {split} split not found at {path}")
    return path


def load_treebank(
    split: str = "dev", limit: int | None = None, *, path: str | Path | None = None
) -> list[TreebankSentence]:
    """The first ``limit`` sentences (all by default) of UD English EWT ``split`` (or of a
    CoNLL-U file at ``path``)."""
    import conllu

    if limit is not None and limit < 1:
        raise InputError(f"limit must be a positive integer, got {limit!r}")
    out: list[TreebankSentence] = []
    with open(path or _path(split), encoding="utf-8") as f:
        for tl in conllu.parse_incr(f):
            words = [t for t in tl if isinstance(t["id"], int)]
            if not words:
                continue
            heads = [int(t["head"]) for t in words]
            out.append(
                TreebankSentence(
                    sent_id=str(tl.metadata.get("sent_id", len(out))),
                    text=tl.metadata.get("text") or " ".join(t["form"] for t in words),
                    words=tuple(t["form"] for t in words),
                    upos=tuple(t["upos"] for t in words),
                    heads=tuple(heads),
                    depths=tuple(tree_depths(heads)),
                )
            )
            if limit is not None and len(out) >= limit:
                break
    return out


def first_subtokens(model, sentence: TreebankSentence, *, max_tokens: int | None = None) -> list[int | None]:
    """Per word, the position of its first token in ``model.to_tokens(sentence.text)``.

    ``None`` for a word whose form is not found in order in the text, or whose first
    token is at or beyond ``max_tokens``."""
    text, tok = sentence.text, model.tokenizer
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], enc["offset_mapping"]
    full = model.to_tokens(text)[0].tolist()  # BOS first where the model prepends one; cut at n_ctx
    shift = next((k for k in (1, 0) if full[k:] == list(ids[: len(full) - k])), None)
    if shift is None:
        raise InputError(f"sentence {sentence.sent_id}: the tokenizer's ids differ from model.to_tokens")
    out: list[int | None] = []
    cursor = 0
    for form in sentence.words:
        start = text.find(form, cursor)
        if start < 0:
            out.append(None)
            continue
        cursor = start + len(form)
        pos = next((i for i, (a, b) in enumerate(offsets) if b > start), None)
        pos = None if pos is None else pos + shift
        out.append(None if pos is None or (max_tokens is not None and pos >= max_tokens) else pos)
    return out
