"""A patching task: aligned clean and corrupted token ids, answer ids and the metric that scores them;
the helpers the builders share (candidates grouped by token length, a seeded choice, padding)."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from ...errors import InputError, OutOfRangeError, UserError, spans

__all__ = ["TaskError", "Task", "METRICS", "logit_diff", "prob_diff", "logprob", "value"]


class TaskError(UserError, ValueError):
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


def logit_diff(
    logits: Float[Tensor, "n vocab"], correct: Int[Tensor, "n k"], wrong: Int[Tensor, "n j"]
) -> Float[Tensor, "n"]:
    """Mean logit over the valid (!= -1) ``correct`` ids minus mean over the valid ``wrong`` ids (float32)."""
    x = logits.float()
    return _valid_mean(x, correct) - _valid_mean(x, wrong)


def prob_diff(
    logits: Float[Tensor, "n vocab"], correct: Int[Tensor, "n k"], wrong: Int[Tensor, "n j"]
) -> Float[Tensor, "n"]:
    """Summed softmax probability of the valid ``correct`` ids minus that of the valid ``wrong`` ids (float32)."""
    p = torch.softmax(logits.float(), dim=-1)
    return _valid_sum(p, correct) - _valid_sum(p, wrong)


def logprob(
    logits: Float[Tensor, "n vocab"], correct: Int[Tensor, "n k"], wrong: Int[Tensor, "n j"] | None = None
) -> Float[Tensor, "n"]:
    """``log_softmax(logits)`` at ``correct[:, 0]`` (float32); ``wrong`` is ignored."""
    lp = F.log_softmax(logits.float(), dim=-1)
    return lp.gather(1, correct[:, :1].to(lp.device)).squeeze(1)


def value(
    logits: Float[Tensor, "n vocab"], correct: Int[Tensor, "n k"], wrong: Int[Tensor, "n j"] | None = None
) -> Float[Tensor, "n"]:
    """The mean output over the valid ``correct`` ids, less the mean over the valid ``wrong`` ids where a row has
    any (float32): a numerical output read as it is (a compiled tracr program's one value)."""
    x = logits.float()
    return _valid_mean(x, correct) - (_valid_mean(x, wrong) if wrong is not None else 0.0)


METRICS: dict[str, Callable[..., Tensor]] = {
    "logit_diff": logit_diff,
    "prob_diff": prob_diff,
    "logprob": logprob,
    "value": value,
}


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
            raise InputError(f"{name}: unknown metric {self.metric!r}; known metrics: {list(METRICS)}")
        self._check_tokens(name)
        n, pos = self.clean.shape
        self._check_answers(name, n)
        self._check_metric_rows(name, n)
        if self.d_vocab is not None:
            for f in ("clean", "corrupted", "correct", "wrong"):
                top = int(getattr(self, f).max())
                if top >= self.d_vocab:
                    raise InputError(f"{name}: {f} has token id {top} >= d_vocab {self.d_vocab}")
        for f in ("prompts", "corrupted_prompts"):
            texts = tuple(getattr(self, f))
            if texts and len(texts) != n:
                raise InputError(f"{name}: {f} must be empty or hold one text per prompt ({n}), got {len(texts)}")
            object.__setattr__(self, f, texts)
        positions = self._checked_positions(name, n, pos)
        for f in ("clean", "corrupted", "correct", "wrong"):
            object.__setattr__(self, f, getattr(self, f).long())
        object.__setattr__(self, "positions", positions)

    def _check_tokens(self, name: str) -> None:
        """Raise unless ``clean`` and ``corrupted`` are aligned, non-empty ``[n, pos]`` non-negative integer ids."""
        for f in ("clean", "corrupted"):
            t = getattr(self, f)
            if not _is_int(t) or t.ndim != 2:
                raise InputError(
                    f"{name}: {f} must be a 2-D integer tensor [n, pos] of token ids, got "
                    f"{type(t).__name__} {getattr(t, 'dtype', '')} "
                    f"of shape {tuple(getattr(t, 'shape', ()))}"
                )
        if self.clean.shape != self.corrupted.shape:
            raise InputError(
                f"{name}: clean and corrupted must have the same shape (the task needs aligned "
                f"positions), got clean {tuple(self.clean.shape)} "
                f"and corrupted {tuple(self.corrupted.shape)}"
            )
        n, pos = self.clean.shape
        if n == 0:
            raise InputError(f"{name}: no prompts (n == 0)")
        if pos == 0:
            raise InputError(f"{name}: prompts have no tokens (pos == 0)")
        for f in ("clean", "corrupted"):
            t = getattr(self, f)
            if (t < 0).any():
                raise InputError(f"{name}: {f} has negative token ids")

    def _check_answers(self, name: str, n: int) -> None:
        """Raise unless ``correct`` and ``wrong`` are ``[n, k]`` integer ids padded with -1."""
        for f in ("correct", "wrong"):
            t = getattr(self, f)
            if not _is_int(t) or t.ndim != 2 or t.shape[0] != n or t.shape[1] < 1:
                raise InputError(
                    f"{name}: {f} must be an integer tensor [n, k] with n = {n} and k >= 1 "
                    f"(padded with -1), got {type(t).__name__} {getattr(t, 'dtype', '')} "
                    f"of shape {tuple(getattr(t, 'shape', ()))}"
                )
            if (t < -1).any():
                raise InputError(f"{name}: {f} has ids below -1 (-1 is the only padding value)")

    def _check_metric_rows(self, name: str, n: int) -> None:
        """Raise where a row's answer ids leave the metric undefined or constant."""
        no_correct = (self.correct < 0).all(1)
        if no_correct.any():
            rows = no_correct.nonzero().flatten()[:5].tolist()
            raise InputError(f"{name}: row(s) {rows} of correct have no valid id")
        if self.metric == "logprob" and (self.correct[:, 0] < 0).any():
            bad = (self.correct[:, 0] < 0).nonzero().flatten()[:5].tolist()
            raise InputError(f"{name}: metric 'logprob' scores correct[:, 0], which is -1 in row(s) {bad}")
        if self.metric in ("logit_diff", "prob_diff"):
            no_wrong = (self.wrong < 0).all(1)
            if no_wrong.any():
                raise InputError(
                    f"{name}: metric {self.metric!r} needs a wrong id in every row; row(s) "
                    f"{no_wrong.nonzero().flatten()[:5].tolist()} of wrong are empty (all -1)"
                )
            same = [i for i in range(n) if _ids(self.correct[i]) == _ids(self.wrong[i])]
            if same:
                raise InputError(
                    f"{name}: row(s) {same[:5]} have the same correct and wrong ids, so their metric "
                    f"{self.metric!r} is constant (0 whatever the model does)"
                )

    def _checked_positions(self, name: str, n: int, pos: int) -> dict[str, Tensor]:
        """The named positions as checked ``[n]`` long tensors, ``"end"`` (= ``pos - 1``) added."""
        end = torch.full((n,), pos - 1, dtype=torch.long, device=self.clean.device)
        positions: dict[str, Tensor] = {}
        for key, p in dict(self.positions).items():
            p = torch.as_tensor(p, device=self.clean.device)
            if not _is_int(p) or p.shape != (n,):
                raise InputError(
                    f"{name}: position {key!r} must be {n} integer token indices, "
                    f"got shape {tuple(p.shape)} dtype {p.dtype}"
                )
            if ((p < 0) | (p >= pos)).any():
                raise InputError(
                    f"{name}: position {key!r} is out of range [0, {pos}): min {int(p.min())}, max {int(p.max())}"
                )
            if key == "end" and not torch.equal(p.long(), end):
                raise InputError(f"{name}: position 'end' must be pos - 1 = {pos - 1} in every row")
            positions[key] = p.long()
        positions["end"] = end
        return positions

    @property
    def n(self) -> int:
        """The number of prompts."""
        return int(self.clean.shape[0])

    def score(self, logits: Float[Tensor, "n vocab"]) -> Float[Tensor, "n"]:
        """The metric per prompt from the final position's logits (float32, differentiable, on their device)."""
        if logits.ndim != 2 or logits.shape[0] != self.n:
            raise InputError(
                f"task {self.name!r}: score takes the final position's logits [n={self.n}, vocab], "
                f"got shape {tuple(logits.shape)}"
            )
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
                    raise InputError(f"task {self.name!r}: a boolean mask needs {self.n} entries, got {tuple(t.shape)}")
                t = t.nonzero().flatten()
            rows = t.flatten().tolist()
            bad = [i for i in rows if not -self.n <= i < self.n]
            if bad:
                raise OutOfRangeError(f"task {self.name!r}: row(s) {spans(bad[:50])} out of range for n = {self.n}")
            rows = [i % self.n for i in rows]
        ix = torch.tensor(rows, dtype=torch.long)

        def take(t: Tensor) -> Tensor:
            return t[ix.to(t.device)]

        return replace(
            self,
            clean=take(self.clean),
            corrupted=take(self.corrupted),
            correct=take(self.correct),
            wrong=take(self.wrong),
            positions={k: take(v) for k, v in self.positions.items()},
            prompts=tuple(self.prompts[i] for i in rows) if self.prompts else (),
            corrupted_prompts=tuple(self.corrupted_prompts[i] for i in rows) if self.corrupted_prompts else (),
        )

    def __repr__(self) -> str:
        return (
            f"Task({self.name!r}, n={self.n}, pos={self.clean.shape[1]}, metric={self.metric!r}, "
            f"positions={list(self.positions)})"
        )


# ---------------------------------------------------------------------------------------------
# shared builder machinery


@dataclass
class _Candidate:
    clean: list[int]  # without BOS
    corrupted: list[int]
    correct: list[int]
    wrong: list[int]
    positions: dict[str, int]  # without BOS
    prompt: str
    corrupted_prompt: str


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def _decode(tokenizer, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids))


def _check_n(n: int) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise InputError(f"n must be a positive integer, got {n!r}")


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
        raise TaskError(
            f"{what}: only {len(group)} prompt(s) of equal token length on this tokenizer; a task needs at least 2"
        )
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
