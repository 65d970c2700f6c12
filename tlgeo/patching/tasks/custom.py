"""Your own task: from texts and one-token answers, or a :class:`~.base.Task` made from token ids, checked
against a model."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import torch

from .base import Task, TaskError, _decode, _encode
from ...errors import InputError


# ---------------------------------------------------------------------------------------------
# a task of your own, from texts


def task_from_texts(
    model,
    name: str,
    clean: Sequence[str],
    corrupted: Sequence[str],
    correct: Sequence[str],
    wrong: Sequence[str] = (),
    *,
    metric: str = "logit_diff",
) -> Task:
    """A task from text prompts and single-token answers, on ``model``'s tokenizer (BOS first when the
    model prepends one). ``correct[i]`` / ``wrong[i]``: the answer of prompt ``i``'s clean behaviour and
    the competing one (leading space included, e.g. ``" Paris"``); ``wrong`` may be empty for
    ``"logprob"``. Every prompt pair of different token lengths and every answer that is not one token
    is named in one :class:`TaskError`."""
    tok = model.tokenizer
    n = len(clean)
    for what, seq in (("corrupted", corrupted), ("correct", correct)) + ((("wrong", wrong),) if wrong else ()):
        if len(seq) != n:
            raise InputError(f"task {name!r}: {len(seq)} {what} entries for {n} clean prompts")
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
        problems.append(f"prompts of {lengths} tokens; give prompts of one token length (or build one task per length)")

    def one(text: str, what: str, i: int) -> int:
        ids = _encode(tok, text)
        if len(ids) != 1:
            problems.append(
                f"the {what} answer {text!r} of prompt {i} is {len(ids)} tokens "
                f"{[_decode(tok, [t]) for t in ids]}, not one"
            )
            return -1
        return ids[0]

    right = [[one(t, "correct", i)] for i, t in enumerate(correct)]
    other = [[one(t, "wrong", i)] for i, t in enumerate(wrong)] if wrong else [[-1]] * n
    if problems:
        raise TaskError(
            f"task {name!r}: " + "; ".join(problems) + " (patching needs aligned positions and one-token answers)"
        )
    return Task(
        name,
        torch.tensor([x for x, _ in rows]),
        torch.tensor([y for _, y in rows]),
        torch.tensor(right),
        torch.tensor(other),
        metric=metric,
        prompts=tuple(clean),
        corrupted_prompts=tuple(corrupted),
        d_vocab=int(model.cfg.d_vocab),
    )


def own_task(task: Task, model) -> Task:
    """Your ``task`` checked against ``model``: its token ids inside the vocabulary (a :class:`TaskError`
    naming the largest), ``d_vocab`` set when it was not."""
    d_vocab = int(model.cfg.d_vocab)
    if task.d_vocab is not None and task.d_vocab != d_vocab:
        raise TaskError(
            f"task {task.name!r} was built for a vocabulary of {task.d_vocab} tokens; the model has {d_vocab}"
        )
    top = int(max(task.clean.max(), task.corrupted.max(), task.correct.max(), task.wrong.max()))
    if top >= d_vocab:
        raise TaskError(f"task {task.name!r} holds token id {top}, outside the model's vocabulary of {d_vocab}")
    return replace(task, d_vocab=d_vocab)


# ---------------------------------------------------------------------------------------------
# a task of your own as a file: what a command line reads back


TASK_FILE = "patching_task_{name}.json"  # beside the tables of a run from Python that patched your task


def task_json(task: Task) -> dict:
    """``task`` as plain JSON values: its token ids, answers, metric, named positions and texts (what
    :func:`load_task` reads back into an equal task)."""
    return dict(
        name=task.name,
        clean=task.clean.tolist(),
        corrupted=task.corrupted.tolist(),
        correct=task.correct.tolist(),
        wrong=task.wrong.tolist(),
        metric=task.metric,
        positions={k: v.tolist() for k, v in task.positions.items() if k != "end"},
        prompts=list(task.prompts),
        corrupted_prompts=list(task.corrupted_prompts),
        description=task.description,
        d_vocab=task.d_vocab,
    )


def save_task(task: Task, path) -> str:
    """Write ``task`` (:func:`task_json`) to ``path``, atomically; returns the path as given."""
    import json

    from ...storage import write_text

    write_text(path, json.dumps(task_json(task), indent=0) + "\n")
    return str(path)


def load_task(path) -> Task:
    """The task a JSON file of :func:`save_task` holds (``tlgeo patching --tasks induction,FILE.json``); a missing
    or unreadable file is a ``ValueError`` naming it."""
    import json
    from pathlib import Path

    try:
        d = json.loads(Path(path).read_text())
        return Task(
            d["name"],
            torch.tensor(d["clean"]),
            torch.tensor(d["corrupted"]),
            torch.tensor(d["correct"]),
            torch.tensor(d["wrong"]),
            metric=d["metric"],
            positions={k: torch.tensor(v) for k, v in d.get("positions", {}).items()},
            prompts=tuple(d.get("prompts", ())),
            corrupted_prompts=tuple(d.get("corrupted_prompts", ())),
            description=d.get("description", ""),
            d_vocab=d.get("d_vocab"),
        )
    except FileNotFoundError:
        raise InputError(f"tasks: no task file {path}") from None
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as e:
        raise InputError(f"tasks: {path} does not hold a task ({type(e).__name__}: {e})") from None
