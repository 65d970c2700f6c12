"""Patching tasks on compiled tracr programs (``zoo/tracr-<program>/``): the program's answer at the last position,
clean against a corruption that changes it, scored on the compiled output itself.

The answers come from :data:`PROGRAMS`, each program's meaning written out in Python (what the RASP program computes),
not from the model: a compiled model that does the task gets every clean prompt right. A categorical program
(``reverse``, ``hist``, ``sort``, ``detect_pattern``) is scored by ``logit_diff`` between the clean answer's output
and the corrupted one's; ``frac_prevs``, numerical, by ``value``, its one output (the fraction of x's so far)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Callable, Sequence

import torch

from ...models.errors import UnknownModelError
from ...models.tracr_truth import program_truth as _truth
from .base import Task, TaskError, _check_n

__all__ = ["PROGRAMS", "tracr_task", "program_truth"]


def _frac_prevs(tokens: Sequence[str]) -> list[float]:
    return [sum(t == "x" for t in tokens[: i + 1]) / (i + 1) for i in range(len(tokens))]


def _reverse(tokens: Sequence[str]) -> list[str]:
    return list(reversed(tokens))


def _hist(tokens: Sequence[str]) -> list[int]:
    return [tokens.count(t) for t in tokens]


def _sort(tokens: Sequence[str]) -> list[str]:
    return sorted(tokens, key=float)


def _detect_pattern(tokens: Sequence[str]) -> list[bool]:
    return [i >= 2 and list(tokens[i - 2 : i + 1]) == ["a", "b", "c"] for i in range(len(tokens))]


# program -> its output for the tokens after BOS (one value per position)
PROGRAMS: dict[str, Callable[[Sequence[str]], list]] = {
    "frac_prevs": _frac_prevs,
    "reverse": _reverse,
    "hist": _hist,
    "sort": _sort,
    "detect_pattern": _detect_pattern,
}


def program_truth(folder: str | Path) -> dict:
    """A compiled program's ``tracr.json`` (:mod:`tlgeo.models.tracr_truth`); a :class:`TaskError` without one."""
    try:
        return _truth(folder)
    except UnknownModelError as e:
        raise TaskError(str(e)) from None


def _corrupt(program: str, clean: list[str], vocab: list[str], rng: random.Random) -> list[str] | None:
    """A corrupted input of the clean one's length whose last answer differs (``None`` if this draw has none)."""
    if program == "frac_prevs":  # every x replaced: the fraction falls to 0
        if "x" not in clean:
            return None
        return [t if t != "x" else rng.choice([v for v in vocab if v != "x"]) for t in clean]
    if program == "reverse":  # the last output is the first token
        return [rng.choice([v for v in vocab if v != clean[0]])] + clean[1:]
    if program == "hist":  # the last token's count changes when one of its other occurrences changes, or it does
        return clean[:-1] + [rng.choice([v for v in vocab if v != clean[-1]])]
    if program == "detect_pattern":  # the clean input ends in a b c: one of a, b changed (what each head moves)
        i = rng.choice([-3, -2])
        return clean[:i] + [rng.choice([v for v in vocab if v != clean[i]])] + clean[i + 1 :]
    if program == "sort":  # the last output is the largest token: lower every occurrence of it
        top = max(clean, key=float)
        lower = [v for v in vocab if float(v) < float(top)]
        if not lower:
            return None
        return [t if t != top else rng.choice(lower) for t in clean]
    raise TaskError(f"no corruption for tracr program {program!r}; known programs: {list(PROGRAMS)}")


def tracr_task(tokenizer, *, n: int, seed: int = 0, bos: int | None = None, folder: str | Path | None = None) -> Task:
    """The compiled program's answer at the last position, clean vs corrupted (``n`` prompts of ``max_seq_len``
    tokens after BOS). ``folder``: the program's zoo folder (default the tokenizer's, ``name_or_path``); ``bos``:
    its BOS id (tracr programs need it first; default the tokenizer's)."""
    _check_n(n)
    truth = program_truth(folder if folder is not None else getattr(tokenizer, "name_or_path", ""))
    program = truth["program"]
    if program not in PROGRAMS:
        raise TaskError(f"tracr program {program!r} has no task; known programs: {list(PROGRAMS)}")
    enc, vocab, length = truth["input_encoding"], list(truth["vocab"]), int(truth["max_seq_len"])
    bos = enc[truth["bos"]] if bos is None else int(bos)
    if bos != enc[truth["bos"]]:
        raise TaskError(f"tracr program {program!r}: BOS is id {enc[truth['bos']]}, got bos={bos}")
    out = truth["output_values"]
    rng = random.Random(seed)
    clean, corrupted, correct, wrong, texts, ctexts = [], [], [], [], [], []
    for _ in range(100 * n):
        if len(clean) == n:
            break
        c = [rng.choice(vocab) for _ in range(length)]
        if program == "detect_pattern":  # the pattern at the end: the clean answer is True
            c[-3:] = ["a", "b", "c"]
        k = _corrupt(program, c, vocab, rng)
        if k is None:
            continue
        a, b = PROGRAMS[program](c)[-1], PROGRAMS[program](k)[-1]
        if a == b:
            continue
        clean.append([bos] + [enc[t] for t in c])
        corrupted.append([bos] + [enc[t] for t in k])
        if out is None:  # numerical: the one output
            correct.append([0]), wrong.append([-1])
        else:
            correct.append([out.index(str(a))]), wrong.append([out.index(str(b))])
        texts.append(" ".join(c)), ctexts.append(" ".join(k))
    if len(clean) < 2:
        raise TaskError(f"tracr program {program!r}: fewer than 2 clean/corrupted pairs with different answers")
    return Task(
        name=f"tracr_{program}",
        clean=torch.tensor(clean),
        corrupted=torch.tensor(corrupted),
        correct=torch.tensor(correct),
        wrong=torch.tensor(wrong),
        metric="value" if out is None else "logit_diff",
        prompts=tuple(texts),
        corrupted_prompts=tuple(ctexts),
        description=f"tracr {program}: {truth['description']}; the last position's answer, clean vs corrupted",
    )
