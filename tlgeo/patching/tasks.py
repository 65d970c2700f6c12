"""Patching tasks: clean/corrupted prompt sets with a per-prompt metric (higher = the clean behaviour).

A :class:`Task` holds aligned token ids (``clean`` and ``corrupted``, ``[n, pos]``, BOS first when
the model prepends one), the answer ids (``correct`` and ``wrong``, ``[n, k]``, padded with -1) and
the metric that scores the final position's logits:

* ``logit_diff``: mean logit of the valid correct ids minus mean logit of the valid wrong ids;
* ``prob_diff``: summed probability of the correct ids minus summed probability of the wrong ids;
* ``logprob``: log-probability of ``correct[:, 0]``.

Four builders make tasks offline, deterministically by seed, on any tokenizer they can:
:func:`ioi_task` (Wang et al. 2022), :func:`agreement_task` (BLiMP subject–verb agreement),
:func:`greater_than_task` (Hanna et al. 2023) and :func:`induction_task` (repeated random tokens).
Every prompt of a task has the same token length: a builder makes candidates, groups them by
length, keeps the largest group (ties: the shorter length) and takes the first ``n`` in a seeded
order. It returns fewer than ``n`` rows when fewer exist, and raises :class:`TaskError` when fewer
than 2 do. :func:`build_task` builds one by name for a model; :func:`clean_accuracy` checks that
the model does the task.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from ..evals.blimp import AGREEMENT

__all__ = [
    "METRICS", "TaskError", "Task", "logit_diff", "prob_diff", "logprob",
    "IOI_TEMPLATES", "NAMES", "PLACES", "OBJECTS", "ONE_PREFIX", "YEAR_NOUNS", "CENTURIES",
    "ioi_task", "agreement_task", "greater_than_task", "induction_task",
    "task_from_texts", "TASKS", "build_task", "clean_accuracy",
]


class TaskError(ValueError):
    """A builder cannot build its task on this tokenizer (or from this data)."""


# ---------------------------------------------------------------------------------------------
# metrics: pure functions of the final position's logits


def _valid_mean(x: Float[Tensor, "n vocab"], ids: Int[Tensor, "n k"]) -> Float[Tensor, "n"]:
    ids = ids.to(x.device)
    valid = ids >= 0
    got = torch.where(valid, x.gather(1, ids.clamp(min=0)), torch.zeros((), dtype=x.dtype, device=x.device))
    return got.sum(1) / valid.sum(1).clamp(min=1)


def _valid_sum(x: Float[Tensor, "n vocab"], ids: Int[Tensor, "n k"]) -> Float[Tensor, "n"]:
    ids = ids.to(x.device)
    valid = ids >= 0
    got = torch.where(valid, x.gather(1, ids.clamp(min=0)), torch.zeros((), dtype=x.dtype, device=x.device))
    return got.sum(1)


def logit_diff(logits: Float[Tensor, "n vocab"], correct: Int[Tensor, "n k"], wrong: Int[Tensor, "n j"]
               ) -> Float[Tensor, "n"]:
    """Mean logit over the valid (!= -1) ``correct`` ids minus mean over the valid ``wrong`` ids (float32)."""
    x = logits.float()
    return _valid_mean(x, correct) - _valid_mean(x, wrong)


def prob_diff(logits: Float[Tensor, "n vocab"], correct: Int[Tensor, "n k"], wrong: Int[Tensor, "n j"]
              ) -> Float[Tensor, "n"]:
    """Summed softmax probability of the valid ``correct`` ids minus that of the valid ``wrong`` ids (float32)."""
    p = torch.softmax(logits.float(), dim=-1)
    return _valid_sum(p, correct) - _valid_sum(p, wrong)


def logprob(logits: Float[Tensor, "n vocab"], correct: Int[Tensor, "n k"], wrong: Int[Tensor, "n j"] | None = None
            ) -> Float[Tensor, "n"]:
    """``log_softmax(logits)`` at ``correct[:, 0]`` (float32); ``wrong`` is ignored."""
    lp = F.log_softmax(logits.float(), dim=-1)
    return lp.gather(1, correct[:, :1].to(lp.device)).squeeze(1)


METRICS: dict[str, Callable[..., Tensor]] = {"logit_diff": logit_diff, "prob_diff": prob_diff, "logprob": logprob}


# ---------------------------------------------------------------------------------------------
# the task


def _is_int(t: Any) -> bool:
    return isinstance(t, Tensor) and not t.dtype.is_floating_point and not t.dtype.is_complex and t.dtype != torch.bool


def _ids(row: Tensor) -> set[int]:
    return {int(i) for i in row if i >= 0}


@dataclass(frozen=True, eq=False)
class Task:
    """A clean/corrupted prompt set with a per-prompt metric (higher = the clean behaviour).

    ``clean``, ``corrupted``: ``[n, pos]`` token ids, BOS first when the model prepends one, positions
    aligned; ``correct``, ``wrong``: ``[n, k]`` answer ids padded with -1 (``wrong`` may be all -1 for
    ``"logprob"``); ``positions``: named ``[n]`` token indices (``"end"`` = ``pos - 1`` is always added);
    ``d_vocab``: when given, every id must be below it.
    """

    name: str
    clean: Int[Tensor, "n pos"]
    corrupted: Int[Tensor, "n pos"]
    correct: Int[Tensor, "n k"]
    wrong: Int[Tensor, "n j"]
    metric: str = "logit_diff"
    positions: Mapping[str, Int[Tensor, "n"]] = field(default_factory=dict)
    prompts: tuple[str, ...] = ()
    corrupted_prompts: tuple[str, ...] = ()
    description: str = ""
    d_vocab: int | None = None

    def __post_init__(self) -> None:
        name = f"task {self.name!r}"
        if self.metric not in METRICS:
            raise ValueError(f"{name}: unknown metric {self.metric!r}; known metrics: {list(METRICS)}")
        for f in ("clean", "corrupted"):
            t = getattr(self, f)
            if not _is_int(t) or t.ndim != 2:
                raise ValueError(f"{name}: {f} must be a 2-D integer tensor [n, pos] of token ids, got "
                                 f"{type(t).__name__} {getattr(t, 'dtype', '')} "
                                 f"of shape {tuple(getattr(t, 'shape', ()))}")
        if self.clean.shape != self.corrupted.shape:
            raise ValueError(f"{name}: clean and corrupted must have the same shape (the task needs aligned "
                             f"positions), got clean {tuple(self.clean.shape)} "
                             f"and corrupted {tuple(self.corrupted.shape)}")
        n, pos = self.clean.shape
        if n == 0:
            raise ValueError(f"{name}: no prompts (n == 0)")
        if pos == 0:
            raise ValueError(f"{name}: prompts have no tokens (pos == 0)")
        for f in ("clean", "corrupted"):
            t = getattr(self, f)
            if (t < 0).any():
                raise ValueError(f"{name}: {f} has negative token ids")
        for f in ("correct", "wrong"):
            t = getattr(self, f)
            if not _is_int(t) or t.ndim != 2 or t.shape[0] != n or t.shape[1] < 1:
                raise ValueError(f"{name}: {f} must be an integer tensor [n, k] with n = {n} and k >= 1 "
                                 f"(padded with -1), got {type(t).__name__} {getattr(t, 'dtype', '')} "
                                 f"of shape {tuple(getattr(t, 'shape', ()))}")
            if (t < -1).any():
                raise ValueError(f"{name}: {f} has ids below -1 (-1 is the only padding value)")
        no_correct = (self.correct < 0).all(1)
        if no_correct.any():
            rows = no_correct.nonzero().flatten()[:5].tolist()
            raise ValueError(f"{name}: row(s) {rows} of correct have no valid id")
        if self.metric == "logprob" and (self.correct[:, 0] < 0).any():
            bad = (self.correct[:, 0] < 0).nonzero().flatten()[:5].tolist()
            raise ValueError(f"{name}: metric 'logprob' scores correct[:, 0], which is -1 in row(s) {bad}")
        if self.metric in ("logit_diff", "prob_diff"):
            no_wrong = (self.wrong < 0).all(1)
            if no_wrong.any():
                raise ValueError(f"{name}: metric {self.metric!r} needs a wrong id in every row; row(s) "
                                 f"{no_wrong.nonzero().flatten()[:5].tolist()} of wrong are empty (all -1)")
            same = [i for i in range(n) if _ids(self.correct[i]) == _ids(self.wrong[i])]
            if same:
                raise ValueError(f"{name}: row(s) {same[:5]} have the same correct and wrong ids, so their metric "
                                 f"{self.metric!r} is constant (0 whatever the model does)")
        if self.d_vocab is not None:
            for f in ("clean", "corrupted", "correct", "wrong"):
                top = int(getattr(self, f).max())
                if top >= self.d_vocab:
                    raise ValueError(f"{name}: {f} has token id {top} >= d_vocab {self.d_vocab}")
        for f in ("prompts", "corrupted_prompts"):
            texts = tuple(getattr(self, f))
            if texts and len(texts) != n:
                raise ValueError(f"{name}: {f} must be empty or hold one text per prompt ({n}), got {len(texts)}")
            object.__setattr__(self, f, texts)
        end = torch.full((n,), pos - 1, dtype=torch.long, device=self.clean.device)
        positions: dict[str, Tensor] = {}
        for key, p in dict(self.positions).items():
            p = torch.as_tensor(p, device=self.clean.device)
            if not _is_int(p) or p.shape != (n,):
                raise ValueError(f"{name}: position {key!r} must be {n} integer token indices, "
                                 f"got shape {tuple(p.shape)} dtype {p.dtype}")
            if ((p < 0) | (p >= pos)).any():
                raise ValueError(f"{name}: position {key!r} is out of range [0, {pos}): "
                                 f"min {int(p.min())}, max {int(p.max())}")
            if key == "end" and not torch.equal(p.long(), end):
                raise ValueError(f"{name}: position 'end' must be pos - 1 = {pos - 1} in every row")
            positions[key] = p.long()
        positions["end"] = end
        for f in ("clean", "corrupted", "correct", "wrong"):
            object.__setattr__(self, f, getattr(self, f).long())
        object.__setattr__(self, "positions", positions)

    @property
    def n(self) -> int:
        """The number of prompts."""
        return int(self.clean.shape[0])

    def score(self, logits: Float[Tensor, "n vocab"]) -> Float[Tensor, "n"]:
        """The metric per prompt from the final position's logits (float32, differentiable, on their device)."""
        if logits.ndim != 2 or logits.shape[0] != self.n:
            raise ValueError(f"task {self.name!r}: score takes the final position's logits [n={self.n}, vocab], "
                             f"got shape {tuple(logits.shape)}")
        return METRICS[self.metric](logits, self.correct, self.wrong)

    def hits(self, logits: Float[Tensor, "n vocab"]) -> Bool[Tensor, "n"]:
        """Per prompt, whether the answer is ahead: score > 0, or for ``logprob`` the top token is
        ``correct[:, 0]`` (on the CPU)."""
        if self.metric == "logprob":
            return (logits.argmax(-1) == self.correct[:, 0].to(logits.device)).cpu()
        return (self.score(logits) > 0).cpu()

    def subset(self, idx: slice | int | Sequence[int] | Tensor) -> Task:
        """The task on rows ``idx`` (a slice, an index, a list of indices or an integer/boolean tensor)."""
        if isinstance(idx, slice):
            rows = list(range(self.n))[idx]
        else:
            t = torch.as_tensor(idx)
            if t.dtype == torch.bool:
                if t.shape != (self.n,):
                    raise ValueError(f"task {self.name!r}: a boolean mask needs {self.n} entries, got {tuple(t.shape)}")
                t = t.nonzero().flatten()
            rows = t.flatten().tolist()
            bad = [i for i in rows if not -self.n <= i < self.n]
            if bad:
                raise IndexError(f"task {self.name!r}: row(s) {bad[:5]} out of range for n = {self.n}")
            rows = [i % self.n for i in rows]
        ix = torch.tensor(rows, dtype=torch.long)

        def take(t: Tensor) -> Tensor:
            return t[ix.to(t.device)]

        return replace(
            self, clean=take(self.clean), corrupted=take(self.corrupted), correct=take(self.correct),
            wrong=take(self.wrong), positions={k: take(v) for k, v in self.positions.items()},
            prompts=tuple(self.prompts[i] for i in rows) if self.prompts else (),
            corrupted_prompts=tuple(self.corrupted_prompts[i] for i in rows) if self.corrupted_prompts else (),
        )

    def __repr__(self) -> str:
        return (f"Task({self.name!r}, n={self.n}, pos={self.clean.shape[1]}, metric={self.metric!r}, "
                f"positions={list(self.positions)})")


# ---------------------------------------------------------------------------------------------
# shared builder machinery


@dataclass
class _Candidate:
    clean: list[int]                 # without BOS
    corrupted: list[int]
    correct: list[int]
    wrong: list[int]
    positions: dict[str, int]        # without BOS
    prompt: str
    corrupted_prompt: str


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def _decode(tokenizer, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids))


def _check_n(n: int) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")


def _select(cands: Sequence[_Candidate], n: int, seed: int, what: str) -> list[_Candidate]:
    """The first ``n`` of the largest equal-length group (ties: the shorter length), in a seeded order."""
    groups: dict[int, list[_Candidate]] = defaultdict(list)
    for c in cands:
        groups[len(c.clean)].append(c)
    if not groups:
        raise TaskError(f"{what}: no candidate prompt could be built on this tokenizer")
    length = max(groups, key=lambda L: (len(groups[L]), -L))
    group = list(groups[length])
    random.Random(seed).shuffle(group)
    if len(group) < 2:
        raise TaskError(f"{what}: only {len(group)} prompt(s) of equal token length on this tokenizer; "
                        f"a task needs at least 2")
    return group[:n]


def _pad(rows: Sequence[Sequence[int]]) -> Tensor:
    k = max(1, max(len(r) for r in rows))
    out = torch.full((len(rows), k), -1, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(list(r), dtype=torch.long)
    return out


def _make_task(name: str, cands: Sequence[_Candidate], metric: str, bos: int | None, description: str) -> Task:
    pre = [] if bos is None else [int(bos)]
    off = len(pre)
    keys = list(cands[0].positions)
    return Task(
        name=name,
        clean=torch.tensor([pre + c.clean for c in cands], dtype=torch.long),
        corrupted=torch.tensor([pre + c.corrupted for c in cands], dtype=torch.long),
        correct=_pad([c.correct for c in cands]),
        wrong=_pad([c.wrong for c in cands]),
        metric=metric,
        positions={k: torch.tensor([c.positions[k] + off for c in cands], dtype=torch.long) for k in keys},
        prompts=tuple(c.prompt for c in cands),
        corrupted_prompts=tuple(c.corrupted_prompt for c in cands),
        description=description,
    )


# ---------------------------------------------------------------------------------------------
# IOI (Wang et al. 2022)

# {N1} and {N2} are the two names of the first clause, {S2} the repeated subject; each base
# template gives an ABBA order (N1 = IO, N2 = S) and a BABA order (N1 = S, N2 = IO).
_IOI_BASE: tuple[str, ...] = (
    "Then, {N1} and {N2} went to the {PLACE}. {S2} gave a {OBJECT} to",
    "When {N1} and {N2} got a {OBJECT} at the {PLACE}, {S2} decided to give it to",
    "After {N1} and {N2} went to the {PLACE}, {S2} gave a {OBJECT} to",
    "While {N1} and {N2} were working at the {PLACE}, {S2} gave a {OBJECT} to",
    "Then, {N1} and {N2} had a long argument at the {PLACE}. Afterwards {S2} said to",
    "When {N1} and {N2} arrived at the {PLACE}, {S2} handed the {OBJECT} to",
    "After the lunch, {N1} and {N2} went to the {PLACE}. {S2} gave a {OBJECT} to",
    "The {PLACE} was quiet when {N1} and {N2} came in. {S2} passed the {OBJECT} to",
)
IOI_TEMPLATES: tuple[str, ...] = tuple(
    t.replace("{N1}", a).replace("{N2}", b)
    for t in _IOI_BASE for a, b in (("{IO}", "{S}"), ("{S}", "{IO}"))
)  # 16 templates: ABBA and BABA of each base
NAMES: tuple[str, ...] = (
    "Mary", "John", "James", "Michael", "Robert", "David", "William", "Richard", "Joseph", "Thomas",
    "Charles", "Daniel", "Matthew", "Anthony", "Mark", "Paul", "Steven", "Andrew", "Kevin", "Brian",
    "George", "Edward", "Jason", "Ryan", "Jacob", "Gary", "Eric", "Scott", "Frank", "Patrick",
    "Peter", "Sam", "Tom", "Alex", "Ben", "Jack", "Henry", "Elizabeth", "Sarah", "Jessica",
    "Karen", "Nancy", "Lisa", "Betty", "Sandra", "Ashley", "Emily", "Michelle", "Laura", "Rachel",
    "Anna", "Kate", "Rose", "Alice", "Grace", "Amy", "Helen", "Emma", "Lucy", "Julia",
)
PLACES: tuple[str, ...] = ("store", "garden", "restaurant", "school", "hospital", "office", "station", "park")
OBJECTS: tuple[str, ...] = ("drink", "book", "ring", "basketball", "computer", "necklace", "snack", "bone")


def _single_token_names(tokenizer) -> dict[str, int]:
    out = {}
    for name in NAMES:
        ids = _encode(tokenizer, " " + name)
        if len(ids) == 1:
            out[name] = ids[0]
    return out


def ioi_task(tokenizer, *, n: int, seed: int = 0, bos: int | None = None) -> Task:
    """Indirect object identification: ``"... {S} gave a {OBJECT} to"`` -> ``" {IO}"`` rather than ``" {S}"``.

    Clean prompts fill one of :data:`IOI_TEMPLATES` (ABBA and BABA orders) with two single-token
    names (IO and S, S twice), a place and an object. The corrupted ("ABC") prompt is the same
    template with three other names A', B', C, all different from each other and from IO and S:
    IO -> A', S1 -> B', S2 -> C, so no name repeats. ``correct`` = the IO token, ``wrong`` = the S
    token (``[n, 1]``); metric ``logit_diff``; positions ``"IO"``, ``"S1"``, ``"S2"`` (clean name
    tokens, after BOS) and ``"end"``. Candidates whose names do not stay single aligned tokens in
    context are dropped; the rest are grouped by token length and the first ``n`` of the largest
    group (ties: the shorter) in a seeded order are kept: fewer rows than ``n`` only if fewer exist,
    :class:`TaskError` if fewer than 2, or fewer than 5 single-token names.
    """
    _check_n(n)
    names = _single_token_names(tokenizer)
    if len(names) < 5:
        raise TaskError(f"only {len(names)} single-token names in this tokenizer: the IOI task needs at least 5 "
                        f"(IO, S and three others for the corrupted prompt); got {sorted(names)}")
    rng = random.Random(seed)
    pool = sorted(names)
    seen: set[str] = set()
    cands: list[_Candidate] = []
    for _ in range(16 * n + 256):
        template = rng.choice(IOI_TEMPLATES)
        io, s, a2, b2, c2 = rng.sample(pool, 5)
        place, obj = rng.choice(PLACES), rng.choice(OBJECTS)

        def fill(io_name: str, s1: str, s2: str) -> str:
            return template.format(IO=io_name, S=s1, S2=s2, PLACE=place, OBJECT=obj)

        text = fill(io, s, s)
        if text in seen:
            continue
        seen.add(text)
        cand = _ioi_candidate(tokenizer, text, fill(a2, b2, c2), names, (io, s), (a2, b2, c2))
        if cand is not None:
            cands.append(cand)
    chosen = _select(cands, n, seed, "the IOI task")
    return _make_task("ioi", chosen, "logit_diff", bos,
                      "indirect object identification (Wang et al. 2022): IO vs S name; ABC corruption")


def _ioi_candidate(tokenizer, text: str, corrupted_text: str, names: Mapping[str, int],
                   clean_names: tuple[str, str], abc: tuple[str, str, str]) -> _Candidate | None:
    ids = _encode(tokenizer, text)
    io_id, s_id = names[clean_names[0]], names[clean_names[1]]
    io_at = [i for i, t in enumerate(ids) if t == io_id]
    s_at = [i for i, t in enumerate(ids) if t == s_id]
    if len(io_at) != 1 or len(s_at) != 2:
        return None
    expected = list(ids)
    for at, name in zip((io_at[0], s_at[0], s_at[1]), abc):
        expected[at] = names[name]
    if _encode(tokenizer, corrupted_text) != expected:
        return None
    return _Candidate(ids, expected, [io_id], [s_id], {"IO": io_at[0], "S1": s_at[0], "S2": s_at[1]},
                      text, corrupted_text)


# ---------------------------------------------------------------------------------------------
# subject–verb agreement (BLiMP one-prefix paradigms)

# the four paradigms of AGREEMENT whose rows have one_prefix_method true (the *_2 ones have none)
ONE_PREFIX: tuple[str, ...] = tuple(p for p in AGREEMENT if p in {
    "regular_plural_subject_verb_agreement_1", "irregular_plural_subject_verb_agreement_1",
    "distractor_agreement_relational_noun", "distractor_agreement_relative_clause",
})


def _blimp_rows(paradigm: str) -> list[dict]:
    """The raw rows of a BLiMP paradigm, offline from ``<data>/blimp`` (the hub when there is no copy)."""
    from ..data import data_dir

    try:
        path = data_dir() / "blimp" / f"{paradigm}.jsonl"
    except FileNotFoundError:
        path = None
    if path is not None and path.is_file():
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if path is not None and path.parent.is_dir():
        known = sorted(p.stem for p in path.parent.glob("*.jsonl"))
        raise ValueError(f"unknown BLiMP paradigm {paradigm!r}; offline ones: {known}")
    from datasets import load_dataset  # no offline copy: the hub, for online users

    return [dict(r) for r in load_dataset("nyu-mll/blimp", paradigm, split="train")]


def agreement_task(tokenizer, *, n: int, seed: int = 0, bos: int | None = None,
                   paradigms: Sequence[str] = ONE_PREFIX) -> Task:
    """Subject–verb agreement from BLiMP's one-prefix rows: ``"The cups"`` -> good verb rather than bad verb.

    Clean prompt = ``one_prefix_prefix``; ``correct`` / ``wrong`` = the first token of
    ``" " + one_prefix_word_good`` / ``" " + one_prefix_word_bad`` (``[n, 1]``); rows whose two
    first tokens are equal are dropped. Corruption: the corrupted prompt is the prefix of another
    row B of the same paradigm whose answer pair is swapped, i.e. first token of good_B == first
    token of bad_A and of bad_B == of good_A (its subject has the opposite number), with the same
    token length; B is drawn with the seed among all such rows, and rows with none are dropped. So
    the corrupted prompt prefers the clean prompt's wrong verb. Metric ``logit_diff``; positions
    ``"end"``. Rows are grouped by token length and the first ``n`` of the largest group (ties: the
    shorter) in a seeded order are kept: fewer than ``n`` only if fewer exist, :class:`TaskError`
    if fewer than 2.
    """
    _check_n(n)
    paradigms = tuple(paradigms)
    if not paradigms:
        raise ValueError(f"no paradigms given; one-prefix ones: {list(ONE_PREFIX)}")
    rng = random.Random(seed)
    cands: list[_Candidate] = []
    for paradigm in paradigms:
        rows = [r for r in _blimp_rows(paradigm) if r.get("one_prefix_method")]
        if not rows:
            raise ValueError(f"BLiMP paradigm {paradigm!r} has no one-prefix rows; choose from {list(ONE_PREFIX)}")
        items, seen = [], set()
        for r in rows:
            key = (r["one_prefix_prefix"], r["one_prefix_word_good"], r["one_prefix_word_bad"])
            if key in seen:
                continue
            seen.add(key)
            good = _encode(tokenizer, " " + r["one_prefix_word_good"])
            bad = _encode(tokenizer, " " + r["one_prefix_word_bad"])
            prefix = _encode(tokenizer, r["one_prefix_prefix"])
            if good and bad and prefix and good[0] != bad[0]:
                items.append((r, prefix, good[0], bad[0]))
        by_key: dict[tuple[int, int, int], list[int]] = defaultdict(list)
        for j, (_, prefix, g, b) in enumerate(items):
            by_key[(len(prefix), g, b)].append(j)
        for r, prefix, g, b in items:
            partners = by_key.get((len(prefix), b, g), [])
            if not partners:
                continue
            other_r, other_prefix, _, _ = items[rng.choice(partners)]
            cands.append(_Candidate(prefix, other_prefix, [g], [b], {}, r["one_prefix_prefix"],
                                    other_r["one_prefix_prefix"]))
    chosen = _select(cands, n, seed, "the agreement task")
    return _make_task("agreement", chosen, "logit_diff", bos,
                      "BLiMP subject-verb agreement (one-prefix): good vs bad verb; corrupted = a prefix "
                      "of the opposite number from the same paradigm")


# ---------------------------------------------------------------------------------------------
# greater-than (Hanna et al. 2023)

YEAR_NOUNS: tuple[str, ...] = (
    "war", "expedition", "drought", "reign", "famine", "siege", "journey", "rebellion",
    "occupation", "voyage", "conflict", "dynasty",
)
CENTURIES: tuple[str, ...] = ("17", "18", "19")


def _year_split(tokenizer, cc: str, yy: str) -> list[int] | None:
    """The tokens of ``yy`` in ``" {cc}{yy}"`` when the year splits as ``" {cc}"`` + the rest, else None."""
    head = _encode(tokenizer, f" {cc}")
    ids = _encode(tokenizer, f" {cc}{yy}")
    return ids[len(head):] if ids[: len(head)] == head and len(ids) > len(head) else None


def _year_mode(tokenizer) -> str:
    tail = _year_split(tokenizer, "17", "32")
    if tail is not None and len(tail) == 1 and _decode(tokenizer, tail) == "32":
        return "two_digit"
    if tail is not None and len(tail) == 2 and [_decode(tokenizer, [t]) for t in tail] == ["3", "2"]:
        return "digit"
    raise TaskError(f"this tokenizer splits ' 1732' as {_encode(tokenizer, ' 1732')}: the greater-than task needs "
                    f"' 17' + a two-digit token '32' (GPT-2 style) or one token per digit (SmolLM2, Gemma)")


def _answer_ids(tokenizer, mode: str) -> list[int]:
    """The token of each answer: digits 0-9 (``"digit"``) or ``"00"``-``"99"`` (``"two_digit"``)."""
    out = []
    for v in range(10 if mode == "digit" else 100):
        text = str(v) if mode == "digit" else f"{v:02d}"
        tail = _year_split(tokenizer, "17", text + "0" if mode == "digit" else text)
        want = 2 if mode == "digit" else 1
        if tail is not None and len(tail) == want and _decode(tokenizer, tail[:1]) == text:
            out.append(tail[0])
            continue
        alone = _encode(tokenizer, text)
        if len(alone) == 1 and _decode(tokenizer, alone) == text:
            out.append(alone[0])
            continue
        raise TaskError(f"greater-than: no single token for {text!r} in this tokenizer")
    return out


def greater_than_task(tokenizer, *, n: int, seed: int = 0, bos: int | None = None) -> Task:
    """Greater-than: ``"The war lasted from the year 1732 to the year 17"`` -> a later year.

    The tokenizer's year split is detected from ``" 1732"``. GPT-2 style (``" 17"`` + ``"32"``): the
    answers are the two-digit tokens, ``correct`` = YY+1..99, ``wrong`` = 00..YY, YY in 02..98.
    One token per digit (SmolLM2, Gemma): the next token is the tens digit, ``correct`` = digits
    above the tens digit of YY, ``wrong`` = digits below it (the equal one left out), tens in 1..8.
    Otherwise :class:`TaskError`. Corrupted: the same prompt with YY = ``"01"``. Nouns
    :data:`YEAR_NOUNS`, centuries :data:`CENTURIES`; metric ``prob_diff``; positions ``"YY"`` (the
    first token of the clean year's YY part) and ``"end"``. Only years that split as ``" {CC}"`` +
    YY tokens in context are kept; candidates are grouped by token length and the first ``n`` of the
    largest group (ties: the shorter) in a seeded order are kept: fewer than ``n`` only if fewer
    exist, :class:`TaskError` if fewer than 2.
    """
    _check_n(n)
    mode = _year_mode(tokenizer)
    answers = _answer_ids(tokenizer, mode)
    middle = _encode(tokenizer, " to the year")
    cands: list[_Candidate] = []
    yys = range(10, 90) if mode == "digit" else range(2, 99)
    for noun in YEAR_NOUNS:
        start = f"The {noun} lasted from the year"
        head = _encode(tokenizer, start)
        for cc in CENTURIES:
            end = _encode(tokenizer, f" {cc}")
            corrupt_tail = _year_split(tokenizer, cc, "01")
            for v in yys:
                yy = f"{v:02d}"
                tail = _year_split(tokenizer, cc, yy)
                if tail is None or corrupt_tail is None or len(tail) != len(corrupt_tail):
                    continue
                text = f"{start} {cc}{yy} to the year {cc}"
                bad_text = f"{start} {cc}01 to the year {cc}"
                ids = _encode(tokenizer, text)
                if ids != head + end + tail + middle + end:
                    continue
                bad = _encode(tokenizer, bad_text)
                if bad != head + end + corrupt_tail + middle + end:
                    continue
                if mode == "digit":
                    tens = v // 10
                    correct, wrong = answers[tens + 1:], answers[:tens]
                else:
                    correct, wrong = answers[v + 1:], answers[: v + 1]
                cands.append(_Candidate(ids, bad, correct, wrong, {"YY": len(head) + len(end)}, text, bad_text))
    chosen = _select(cands, n, seed, "the greater-than task")
    return _make_task("greater_than", chosen, "prob_diff", bos,
                      f"greater-than (Hanna et al. 2023), {mode} years: P(later) - P(earlier); corrupted YY = 01")


# ---------------------------------------------------------------------------------------------
# induction


def induction_task(tokenizer, *, n: int, seed: int = 0, bos: int | None = None, length: int = 10,
                   min_id: int | None = None, max_id: int | None = None) -> Task:
    """Induction on repeated random tokens: ``r1..rL r1..r(L-1)`` -> ``rL``.

    ``length`` distinct ids are drawn per prompt from ``[min_id, max_id)`` minus the tokenizer's special
    ids (defaults: ``min_id`` 100, or 3 for a vocabulary under 300 tokens; ``max_id`` the tokenizer's
    size). Clean = ``[bos] r1..rL r1..r(L-1)``; corrupted = ``[bos] q1..qL r1..r(L-1)`` with ``length``
    fresh distinct ids (no repeat, so nothing to copy). ``correct`` = ``rL`` (``[n, 1]``), ``wrong`` all
    -1; metric ``logprob``; positions ``"end"``. All prompts have length ``2 * length - 1`` (+ BOS), so
    exactly ``n`` rows are made. Works on any tokenizer with ``2 * length`` ordinary ids.
    """
    _check_n(n)
    if not isinstance(length, int) or length < 2:
        raise ValueError(f"length must be an integer >= 2, got {length!r}")
    size = len(tokenizer)
    lo = (3 if size < 300 else 100) if min_id is None else int(min_id)
    hi = size if max_id is None else int(max_id)
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    ids = torch.tensor([i for i in range(max(lo, 0), hi) if i not in special], dtype=torch.long)
    if ids.numel() < 2 * length:
        raise TaskError(f"induction: only {ids.numel()} ordinary token ids in [{lo}, {hi}); "
                        f"length {length} needs {2 * length}")
    gen = torch.Generator().manual_seed(seed)
    pre = [] if bos is None else [int(bos)]
    clean, corrupted, correct = [], [], []
    for _ in range(n):
        draw = ids[torch.randperm(ids.numel(), generator=gen)[: 2 * length]].tolist()
        r, q = draw[:length], draw[length:]
        clean.append(pre + r + r[:-1])
        corrupted.append(pre + q + r[:-1])
        correct.append([r[-1]])
    return Task(
        name="induction", clean=torch.tensor(clean), corrupted=torch.tensor(corrupted),
        correct=torch.tensor(correct), wrong=torch.full((n, 1), -1, dtype=torch.long), metric="logprob",
        description=f"induction on {length} repeated random tokens: log P(r_L); corrupted first half fresh",
    )


# ---------------------------------------------------------------------------------------------
# a task of your own, from texts


def task_from_texts(model, name: str, clean: Sequence[str], corrupted: Sequence[str], correct: Sequence[str],
                    wrong: Sequence[str] = (), *, metric: str = "logit_diff") -> Task:
    """A task from text prompts and single-token answers, on ``model``'s tokenizer (BOS first when the
    model prepends one). ``correct[i]`` / ``wrong[i]``: the answer of prompt ``i``'s clean behaviour and
    the competing one (leading space included, e.g. ``" Paris"``); ``wrong`` may be empty for
    ``"logprob"``. Every prompt pair of different token lengths and every answer that is not one token
    is named in one :class:`TaskError`."""
    tok = model.tokenizer
    n = len(clean)
    for what, seq in (("corrupted", corrupted), ("correct", correct)) + ((("wrong", wrong),) if wrong else ()):
        if len(seq) != n:
            raise ValueError(f"task {name!r}: {len(seq)} {what} entries for {n} clean prompts")
    bos = [tok.bos_token_id] if model.cfg.default_prepend_bos and tok.bos_token_id is not None else []
    problems: list[str] = []
    rows = []
    for i, (a, b) in enumerate(zip(clean, corrupted)):
        x, y = bos + _encode(tok, a), bos + _encode(tok, b)
        if len(x) != len(y):
            problems.append(f"prompt {i} has {len(x)} tokens clean ({a!r}) and {len(y)} corrupted ({b!r})")
        rows.append((x, y))
    lengths = sorted({len(x) for x, _ in rows})
    if len(lengths) > 1 and not problems:
        problems.append(f"prompts of {lengths} tokens; give prompts of one token length (or build one task per "
                        "length)")

    def one(text: str, what: str, i: int) -> int:
        ids = _encode(tok, text)
        if len(ids) != 1:
            problems.append(f"the {what} answer {text!r} of prompt {i} is {len(ids)} tokens "
                            f"{[_decode(tok, [t]) for t in ids]}, not one")
            return -1
        return ids[0]

    right = [[one(t, "correct", i)] for i, t in enumerate(correct)]
    other = [[one(t, "wrong", i)] for i, t in enumerate(wrong)] if wrong else [[-1]] * n
    if problems:
        raise TaskError(f"task {name!r}: " + "; ".join(problems) + " (patching needs aligned positions and "
                        "one-token answers)")
    return Task(name, torch.tensor([x for x, _ in rows]), torch.tensor([y for _, y in rows]), torch.tensor(right),
                torch.tensor(other), metric=metric, prompts=tuple(clean), corrupted_prompts=tuple(corrupted),
                d_vocab=int(model.cfg.d_vocab))


def own_task(task: Task, model) -> Task:
    """Your ``task`` checked against ``model``: its token ids inside the vocabulary (a :class:`TaskError`
    naming the largest), ``d_vocab`` set when it was not."""
    d_vocab = int(model.cfg.d_vocab)
    if task.d_vocab is not None and task.d_vocab != d_vocab:
        raise TaskError(f"task {task.name!r} was built for a vocabulary of {task.d_vocab} tokens; the model has "
                        f"{d_vocab}")
    top = int(max(task.clean.max(), task.corrupted.max(), task.correct.max(), task.wrong.max()))
    if top >= d_vocab:
        raise TaskError(f"task {task.name!r} holds token id {top}, outside the model's vocabulary of {d_vocab}")
    return replace(task, d_vocab=d_vocab)


# ---------------------------------------------------------------------------------------------
# by name, and a model's accuracy

TASKS: dict[str, Callable[..., Task]] = {
    "ioi": ioi_task, "agreement": agreement_task, "greater_than": greater_than_task, "induction": induction_task,
}


def build_task(name: str, model, *, n: int, seed: int = 0, **kwargs: Any) -> Task:
    """Task ``name`` of :data:`TASKS` on ``model``'s tokenizer: BOS first when the model prepends one,
    ``d_vocab`` checked; ``kwargs`` go to the builder (``paradigms=``, ``length=``)."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; known tasks: {list(TASKS)}")
    tok = model.tokenizer
    bos = tok.bos_token_id if model.cfg.default_prepend_bos else None
    d_vocab = int(model.cfg.d_vocab)
    if name == "induction" and "max_id" not in kwargs:
        kwargs["max_id"] = min(len(tok), d_vocab)
    task = TASKS[name](tok, n=n, seed=seed, bos=bos, **kwargs)
    return replace(task, d_vocab=d_vocab)


def _end_logits(model, tokens: Int[Tensor, "n pos"], batch_size: int) -> Float[Tensor, "n vocab"]:
    from ..models import input_device

    dev = input_device(model)
    out = []
    with torch.no_grad():
        for i in range(0, tokens.shape[0], batch_size):
            out.append(model(tokens[i: i + batch_size].to(dev))[:, -1].float().cpu())
    return torch.cat(out)


def clean_accuracy(model, task: Task, *, batch_size: int = 32) -> dict[str, float]:
    """How well ``model`` does ``task``: ``n``, ``accuracy`` and ``corrupted_accuracy`` (score > 0, or for
    ``logprob`` the top token is ``correct[:, 0]``), ``clean_metric`` and ``corrupted_metric`` (mean scores)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    out: dict[str, float] = {"n": task.n}
    for label, tokens in (("clean", task.clean), ("corrupted", task.corrupted)):
        logits = _end_logits(model, tokens, batch_size)
        out["accuracy" if label == "clean" else "corrupted_accuracy"] = float(task.hits(logits).float().mean())
        out[f"{label}_metric"] = float(task.score(logits).mean())
    return out
