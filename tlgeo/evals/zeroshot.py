"""Offline zero-shot multiple choice by log-likelihood, with any forward hooks active.

Each item offers choices ``(context_i, continuation_i)``; a choice's score is the
sum of the log-probabilities of its continuation tokens given its context.
``acc`` takes the argmax of the sums, ``acc_norm`` the argmax of the sums divided
by the continuation's length in characters (lm-eval's ``acc_norm``, which divides
by the choice text's length; ours counts the leading space too, the same for
every choice of an item). Ties go to the first choice.

Tasks (files under ``<data>/zeroshot``, see ``shared/data/README.md``) and prompts,
following lm-eval's templates:

* ``piqa``: ``"Question: {goal}\\nAnswer:"`` + ``" {sol}"`` (official ``valid.jsonl`` +
  ``valid-labels.lst``);
* ``arc_easy``, ``arc_challenge``, ``boolq``: ``"{query}\\nAnswer:"`` + ``" {choice}"``
  (llm-foundry's ``query`` already holds ``"Question: ..."`` / ``"Passage: ..."``);
* ``openbookqa``: ``"{query}"`` + ``" {choice}"``;
* ``winogrande``: partial scoring: ``"{context_option}"`` + ``" {continuation}"``: only
  the shared continuation is scored, after each context option.

Tokenization (lm-eval's causal scheme): trailing whitespace of the context moves to
the continuation; ``context + continuation`` is tokenized as one string and the
boundary is located at the end of the separately tokenized context (the longest
common prefix, should a token straddle the boundary). The model reads the joint
tokens (after a BOS when ``prepend_bos``) and exactly the tokens after the boundary
are scored. Inputs longer than ``max_length`` (default ``model.cfg.n_ctx``) lose
context tokens from the left, and a warning counts them.

Requests of all items of a task are batched together (longest first, right
padding: with causal attention the padding cannot reach the scored positions);
requests with identical input tokens (e.g. BoolQ's one-token " no"/" yes") share
one forward pass.
"""

from __future__ import annotations

import json
import math
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import pandas as pd
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from ..errors import InputError, UnknownNameError
from ..hooks.resume import last_block_output, readout, readout_ok
from ..models import input_device
from ..runner.identity import run_identity
from ..runner.results import ResultLog

__all__ = [
    "TASKS",
    "DEFAULT_TASKS",
    "MCItem",
    "Scores",
    "UnknownTaskError",
    "zeroshot_dir",
    "load_task",
    "encode_pair",
    "score_requests",
    "score_items",
    "summarize_items",
    "evaluate_zeroshot",
    "logged_items",
    "paired_accuracy_change",
]

Hook = tuple[str | Callable, Callable]
DEFAULT_TASKS = ("piqa", "arc_easy", "arc_challenge", "openbookqa", "winogrande", "boolq")
LOG_KEY = ("task", "limit", "tag")


class UnknownTaskError(UnknownNameError, ValueError):
    """A task name that is not in :data:`TASKS`."""


@dataclass(frozen=True)
class MCItem:
    """One multiple-choice item: choice ``i`` scores ``continuations[i]`` after ``contexts[i]``."""

    contexts: tuple[str, ...]
    continuations: tuple[str, ...]
    gold: int

    def __post_init__(self) -> None:
        if len(self.contexts) != len(self.continuations) or len(self.contexts) < 2:
            raise InputError(
                f"an item needs >= 2 choices and one context per continuation, got "
                f"{len(self.contexts)} contexts / {len(self.continuations)} continuations"
            )
        if not 0 <= self.gold < len(self.contexts):
            raise InputError(f"gold {self.gold} out of range for {len(self.contexts)} choices")

    @classmethod
    def multiple_choice(cls, context: str, choices: Sequence[str], gold: int, delimiter: str = " ") -> "MCItem":
        """Shared context, one continuation ``delimiter + choice`` per choice."""
        return cls(tuple(context for _ in choices), tuple(delimiter + c for c in choices), int(gold))

    @classmethod
    def partial(cls, contexts: Sequence[str], continuation: str, gold: int, delimiter: str = " ") -> "MCItem":
        """Partial scoring (WinoGrande): one shared continuation after each context."""
        return cls(tuple(contexts), tuple(delimiter + continuation for _ in contexts), int(gold))

    @property
    def n_choices(self) -> int:
        return len(self.contexts)


# --------------------------------------------------------------------------- data


def _read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _load_piqa(folder: Path) -> list[MCItem]:
    rows = _read_jsonl(folder / "valid.jsonl")
    labels = [int(x) for x in (folder / "valid-labels.lst").read_text().split()]
    if len(labels) != len(rows):
        raise InputError(f"PIQA: {len(rows)} items but {len(labels)} labels in {folder}")
    return [
        MCItem.multiple_choice(f"Question: {r['goal']}\nAnswer:", [r["sol1"], r["sol2"]], y)
        for r, y in zip(rows, labels)
    ]


def _llmfoundry(suffix: str) -> Callable[[Path], list[MCItem]]:
    def load(path: Path) -> list[MCItem]:
        return [MCItem.multiple_choice(r["query"] + suffix, r["choices"], r["gold"]) for r in _read_jsonl(path)]

    return load


def _load_winogrande(path: Path) -> list[MCItem]:
    return [MCItem.partial(r["context_options"], r["continuation"], r["gold"]) for r in _read_jsonl(path)]


@dataclass(frozen=True)
class TaskSpec:
    name: str
    path: str  # relative to the zeroshot folder; PIQA: the folder holding both files
    load: Callable[[Path], list[MCItem]]
    required: tuple[str, ...] = ()


TASKS: dict[str, TaskSpec] = {
    "piqa": TaskSpec("piqa", "piqa", _load_piqa, ("valid.jsonl", "valid-labels.lst")),
    "arc_easy": TaskSpec("arc_easy", "arc_easy/test.llmfoundry.jsonl", _llmfoundry("\nAnswer:")),
    "arc_challenge": TaskSpec("arc_challenge", "arc_challenge/test.llmfoundry.jsonl", _llmfoundry("\nAnswer:")),
    "openbookqa": TaskSpec("openbookqa", "openbookqa/test.llmfoundry.jsonl", _llmfoundry("")),
    "winogrande": TaskSpec("winogrande", "winogrande/dev.llmfoundry.jsonl", _load_winogrande),
    "boolq": TaskSpec("boolq", "boolq/dev.llmfoundry.jsonl", _llmfoundry("\nAnswer:")),
}


def zeroshot_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The folder holding the task files: ``data_dir`` or ``<tlgeo data dir>/zeroshot``."""
    if data_dir is not None:
        path = Path(data_dir).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(f"zero-shot data directory {str(path)!r} does not exist")
        return path
    from ..data import data_dir as _data_dir

    return _data_dir() / "zeroshot"


def load_task(task: str, data_dir: str | os.PathLike | None = None, limit: int | None = None) -> list[MCItem]:
    """The items of ``task``, in file order; ``limit`` keeps the first ``limit`` (deterministic)."""
    if task not in TASKS:
        raise UnknownTaskError(f"unknown zero-shot task {task!r}; known tasks: {sorted(TASKS)}")
    if limit is not None and limit < 1:
        raise InputError(f"limit must be >= 1 or None, got {limit}")
    spec = TASKS[task]
    path = zeroshot_dir(data_dir) / spec.path
    missing = [path / f for f in spec.required] if spec.required else [path]
    missing = [p for p in missing if not p.is_file()]
    if missing:
        raise FileNotFoundError(
            f"task {task!r}: missing file(s) {[str(p) for p in missing]} "
            f"(known tasks: {sorted(TASKS)}; set data_dir or $TLGEO_DATA)"
        )
    items = spec.load(path)
    if not items:
        raise InputError(f"task {task!r}: no items in {path}")
    return items if limit is None else items[:limit]


# ------------------------------------------------------------------- tokenization


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])


def encode_pair(
    tokenizer, context: str, continuation: str, *, prefix_token_id: int | None = None
) -> tuple[list[int], list[int]]:
    """``(context_ids, continuation_ids)``; the continuation ids are exactly those scored.

    Trailing whitespace of ``context`` moves to ``continuation``; the joint string is
    tokenized once and split where the separately tokenized context ends (longest
    common prefix). ``prefix_token_id`` (the BOS) is put before the context; an empty
    context needs it (or the first continuation token becomes the context).
    """
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        context, continuation = context[:-n_spaces], context[-n_spaces:] + continuation
    if not continuation:
        raise InputError(f"empty continuation after context {context[-40:]!r}: nothing to score")
    prefix = [] if prefix_token_id is None else [prefix_token_id]
    if not context:
        cont = _encode(tokenizer, continuation)
        if not prefix:
            if len(cont) < 2:
                raise InputError(f"empty context, no BOS and a one-token continuation {continuation!r}")
            return cont[:1], cont[1:]
        return prefix, cont
    whole = _encode(tokenizer, context + continuation)
    ctx = _encode(tokenizer, context)
    k = 0
    while k < min(len(ctx), len(whole)) and ctx[k] == whole[k]:
        k += 1
    if k == len(whole):
        raise InputError(f"continuation {continuation!r} adds no token after context {context[-40:]!r}")
    if not prefix and k == 0:
        raise InputError("no BOS and no context token before the continuation")
    return prefix + whole[:k], whole[k:]


def _prefix_token(model, prepend_bos: bool | None) -> int | None:
    if prepend_bos is None:
        prepend_bos = bool(getattr(model.cfg, "default_prepend_bos", True))
    if not prepend_bos:
        return None
    tok = model.tokenizer
    bos = getattr(tok, "bos_token_id", None)
    return bos if bos is not None else getattr(tok, "eos_token_id", None)


# ------------------------------------------------------------------------- scoring


@dataclass
class Scores:
    """Per request: ``logprob`` ``[n]`` float64 (sum over continuation tokens), ``is_greedy``
    ``[n]`` (every continuation token is the argmax), ``n_tokens`` ``[n]`` scored tokens;
    ``truncated`` ``[n]``: context cut from the left to fit ``max_length``."""

    logprob: Float[Tensor, " n"]
    is_greedy: Bool[Tensor, " n"]
    n_tokens: Tensor
    truncated: Bool[Tensor, " n"]


def _unique_inputs(requests: Sequence[tuple[Sequence[int], Sequence[int]]], max_length: int):
    """Each request's input ``(context + continuation)[:-1]``, cut from the left to ``max_length``, deduplicated:
    ``(unique inputs, request indices per input, truncated [n], continuation tokens [n])``."""
    inputs: dict[tuple[int, ...], int] = {}  # unique input -> index
    req_input: list[int] = []
    truncated = torch.zeros(len(requests), dtype=torch.bool)
    n_tok = torch.zeros(len(requests), dtype=torch.long)
    for i, (ctx, cont) in enumerate(requests):
        ctx, cont = list(ctx), list(cont)
        if not cont or not ctx:
            raise InputError(f"request {i}: needs >= 1 context and >= 1 continuation token")
        if len(cont) > max_length:
            raise InputError(f"request {i}: continuation of {len(cont)} tokens exceeds max_length {max_length}")
        full = (ctx + cont)[:-1]
        if len(full) > max_length:
            full, truncated[i] = full[-max_length:], True
        n_tok[i] = len(cont)
        req_input.append(inputs.setdefault(tuple(full), len(inputs)))
    uniq = list(inputs)
    by_input: list[list[int]] = [[] for _ in uniq]
    for i, u in enumerate(req_input):
        by_input[u].append(i)
    return uniq, by_input, truncated, n_tok


def _padded(uniq: list[tuple[int, ...]], batch: list[int], pad: int) -> Int[Tensor, "b width"]:
    """The batch's unique inputs, right-padded with ``pad`` to the first (the longest)."""
    width = len(uniq[batch[0]])
    inp = torch.full((len(batch), width), pad, dtype=torch.long)
    for row, u in enumerate(batch):
        inp[row, : len(uniq[u])] = torch.tensor(uniq[u])
    return inp


def _span_logits(model, inp: Int[Tensor, "b width"], spans: list[tuple[int, int, int, int]], hooks: list, fast: bool):
    """Per ``(request, row, first, end)`` span: the ``[t, vocab]`` logits at its positions; with ``fast`` only
    those positions go through the unembedding, in one call."""
    if fast:
        final = last_block_output(model, inp, hooks)
        got = readout(model, torch.cat([final[row, a:b] for _, row, a, b in spans]))
        return got.split([b - a for *_, a, b in spans])
    logits = model.run_with_hooks(inp, fwd_hooks=hooks) if hooks else model(inp)
    return [logits[row, a:b] for _, row, a, b in spans]


def score_requests(
    model,
    requests: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    batch_size: int = 8,
    fwd_hooks: Iterable[Hook] = (),
    max_length: int | None = None,
    progress: bool = False,
) -> Scores:
    """Log-likelihood of each ``(context_ids, continuation_ids)`` under ``model`` with ``fwd_hooks``.

    The model reads ``(context + continuation)[:-1]``, cut from the left to its last
    ``max_length`` tokens (default ``model.cfg.n_ctx``); log-softmax in float32, sums in
    float64. Identical inputs share one forward; batches are right-padded.
    """
    if batch_size < 1:
        raise InputError(f"batch_size must be >= 1, got {batch_size}")
    n_ctx = model.cfg.n_ctx
    max_length = n_ctx if max_length is None else max_length
    if not 1 <= max_length <= n_ctx:
        raise InputError(f"max_length {max_length} must be in [1, n_ctx={n_ctx}]")
    if not requests:
        raise InputError("no requests to score")

    uniq, by_input, truncated, n_tok = _unique_inputs(requests, max_length)
    targets = [list(r[1]) for r in requests]
    logprob = torch.zeros(len(requests), dtype=torch.float64)
    greedy = torch.zeros(len(requests), dtype=torch.bool)
    order = sorted(range(len(uniq)), key=lambda u: -len(uniq[u]))
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, desc="scoring", unit="batch", leave=False)  # nested under a task bar
    pad = getattr(model.tokenizer, "pad_token_id", None) or 0
    device = input_device(model)
    hooks = list(fwd_hooks)
    fast = None  # only the continuations' positions through the unembedding, where that gives the logits
    with torch.inference_mode():
        for batch in batches:
            inp = _padded(uniq, batch, pad).to(device)
            if fast is None:
                fast = readout_ok(model, inp)
            spans = [
                (i, row, len(uniq[u]) - len(targets[i]), len(uniq[u]))
                for row, u in enumerate(batch)
                for i in by_input[u]
            ]  # (request, row, first, end position)
            for i, rows in zip([i for i, *_ in spans], _span_logits(model, inp, spans, hooks, fast)):
                lp = torch.log_softmax(rows.float(), dim=-1)  # [t, vocab]
                tgt = torch.tensor(targets[i], device=lp.device)
                logprob[i] = lp.gather(-1, tgt[:, None]).double().sum().cpu()
                greedy[i] = bool((lp.argmax(-1) == tgt).all())
    return Scores(logprob=logprob, is_greedy=greedy, n_tokens=n_tok, truncated=truncated)


def score_items(
    model,
    items: Sequence[MCItem],
    *,
    batch_size: int = 8,
    fwd_hooks: Iterable[Hook] = (),
    prepend_bos: bool | None = None,
    max_length: int | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """One row per item: ``item, gold, logprobs`` (per choice), ``n_tokens, lengths``
    (characters), ``pred, pred_norm, correct, correct_norm, n_truncated``."""
    if not items:
        raise InputError("no items to score")
    prefix = _prefix_token(model, prepend_bos)
    reqs, owner = [], []
    for j, it in enumerate(items):
        for c, x in zip(it.contexts, it.continuations):
            reqs.append(encode_pair(model.tokenizer, c, x, prefix_token_id=prefix))
            owner.append(j)
    s = score_requests(
        model, reqs, batch_size=batch_size, fwd_hooks=fwd_hooks, max_length=max_length, progress=progress
    )
    rows, k = [], 0
    for j, it in enumerate(items):
        m = it.n_choices
        lp = s.logprob[k : k + m]
        lengths = [len(x) for x in it.continuations]
        norm = lp / torch.tensor(lengths, dtype=torch.float64)
        pred, pred_norm = int(lp.argmax()), int(norm.argmax())  # first maximum on ties
        rows.append(
            {
                "item": j,
                "gold": it.gold,
                "logprobs": lp.tolist(),
                "n_tokens": s.n_tokens[k : k + m].tolist(),
                "lengths": lengths,
                "pred": pred,
                "pred_norm": pred_norm,
                "correct": pred == it.gold,
                "correct_norm": pred_norm == it.gold,
                "n_truncated": int(s.truncated[k : k + m].sum()),
            }
        )
        k += m
    return pd.DataFrame(rows)


def _stderr(p: float, n: int) -> float:
    """Sample standard error of a mean of ``n`` 0/1 values (lm-eval's ``mean_stderr``)."""
    return math.sqrt(p * (1 - p) / (n - 1)) if n > 1 else float("nan")


def summarize_items(items: pd.DataFrame) -> dict:
    """``n, acc, acc_norm, stderr, acc_norm_stderr, n_truncated`` of a :func:`score_items` frame."""
    n = len(items)
    acc, acc_norm = float(items["correct"].mean()), float(items["correct_norm"].mean())
    return {
        "n": n,
        "acc": acc,
        "acc_norm": acc_norm,
        "stderr": _stderr(acc, n),
        "acc_norm_stderr": _stderr(acc_norm, n),
        "n_truncated": int(items["n_truncated"].sum()),
    }


ITEM_COLUMNS = ("gold", "logprobs", "n_tokens", "lengths", "pred", "pred_norm", "n_truncated")


def _item_frame(task: str, row: dict) -> pd.DataFrame:
    it = pd.DataFrame(row["items"])
    it.insert(0, "item", range(len(it)))
    it.insert(0, "task", task)
    it["correct"] = it["pred"] == it["gold"]
    it["correct_norm"] = it["pred_norm"] == it["gold"]
    return it


def logged_items(
    log_path: str | os.PathLike,
    tag: str,
    tasks: Sequence[str],
    limit: int | None,
    *,
    identity: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """The per-item frame of :func:`evaluate_zeroshot` (``return_items``) read back from its
    log, without a model; ``KeyError`` names a task that is not logged for ``tag``. ``identity``
    (:meth:`tlgeo.runner.identity.RunIdentity.row`; default: the run's, if any): the model whose rows to read,
    where the log holds several."""
    log = ResultLog(log_path, LOG_KEY, identity=identity)
    frames = []
    for task in tasks:
        row = log.get(task=task, limit=limit, tag=tag)
        if row is None:
            raise UnknownNameError(f"no zero-shot log of {task!r} (limit {limit}) for {tag!r} in {log_path}")
        frames.append(_item_frame(task, row))
    return pd.concat(frames, ignore_index=True)


def _check_tasks(tasks: str | Sequence[str]) -> tuple[str, ...]:
    """``tasks`` as a tuple of known task names; none given or an unknown one is a one-line error."""
    tasks = (tasks,) if isinstance(tasks, str) else tuple(tasks)
    if not tasks:
        raise InputError(f"no tasks given; known tasks: {sorted(TASKS)}")
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise UnknownTaskError(f"unknown zero-shot task(s) {unknown}; known tasks: {sorted(TASKS)}")
    return tasks


def _score_task(
    model, key: dict, data_dir, seed: int, batch_size: int, hooks: list, prepend_bos, max_length, progress: bool
) -> dict:
    """One task's log row: its summary, seconds, seed and per-item columns (warns when context was cut)."""
    task, limit = key["task"], key["limit"]
    items = load_task(task, data_dir, limit)
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    df = score_items(
        model,
        items,
        batch_size=batch_size,
        fwd_hooks=hooks,
        prepend_bos=prepend_bos,
        max_length=max_length,
        progress=progress,
    )
    row = {
        **key,
        **summarize_items(df),
        "seconds": time.perf_counter() - t0,
        "seed": seed,
        "items": {c: df[c].tolist() for c in ITEM_COLUMNS},
    }
    if row["n_truncated"]:
        warnings.warn(
            f"{task}: {row['n_truncated']} of {sum(it.n_choices for it in items)} requests "
            f"were longer than max_length {max_length or model.cfg.n_ctx} tokens and lost "
            f"context from the left",
            stacklevel=3,  # the caller of evaluate_zeroshot
        )
    return row


def _summary_frame(rows: list[dict]) -> pd.DataFrame:
    """One row per task, in the documented column order (the columns present)."""
    summary = pd.DataFrame(rows)
    cols = [
        "task",
        "n",
        "acc",
        "acc_norm",
        "stderr",
        "acc_norm_stderr",
        "n_truncated",
        "seconds",
        "limit",
        "tag",
        "seed",
    ]
    return summary[[c for c in cols if c in summary.columns]]


def evaluate_zeroshot(
    model,
    tasks: str | Sequence[str] = DEFAULT_TASKS,
    *,
    limit: int | None = None,
    batch_size: int = 8,
    fwd_hooks: Iterable[Hook] = (),
    data_dir: str | os.PathLike | None = None,
    log_path: str | os.PathLike | None = None,
    seed: int = 0,
    tag: str = "",
    prepend_bos: bool | None = None,
    max_length: int | None = None,
    return_items: bool = False,
    progress: bool = False,
) -> pd.DataFrame | tuple[pd.DataFrame, pd.DataFrame]:
    """Zero-shot accuracy of ``model`` (with ``fwd_hooks``, or inside ``tlgeo.edit(...)``).

    Returns one row per task: ``task, n, acc, acc_norm, stderr`` (of ``acc``),
    ``acc_norm_stderr, n_truncated, seconds``; with ``return_items`` also the per-item
    frame (``task, item`` + :func:`score_items`' columns). ``limit``: the first
    ``limit`` items of each task in file order. ``seed`` seeds torch before each task
    (for stochastic hooks). With ``log_path`` each finished task (summary and
    per-item log-probs) is stored under ``(task, limit, tag)`` and not recomputed;
    give each hook configuration its own ``tag`` when sharing one log.
    """
    tasks = _check_tasks(tasks)
    hooks = list(fwd_hooks)
    log = ResultLog(log_path, LOG_KEY, identity=run_identity(model).row()) if log_path is not None else None
    rows, item_frames = [], []
    task_iter = tasks
    if progress:  # one bar over the tasks, the scoring batches nested under it
        from tqdm.auto import tqdm

        task_iter = tqdm(tasks, desc=f"zero-shot {tag}".strip(), unit="task", leave=False)
    for task in task_iter:
        key = {"task": task, "limit": limit, "tag": tag}
        row = log.get(**key) if log is not None else None
        if row is None:
            row = _score_task(model, key, data_dir, seed, batch_size, hooks, prepend_bos, max_length, progress)
            if log is not None:
                log.add(row)
        rows.append({k: v for k, v in row.items() if k != "items"})
        if return_items:
            item_frames.append(_item_frame(task, row))
    summary = _summary_frame(rows)
    if return_items:
        return summary, pd.concat(item_frames, ignore_index=True)
    return summary


def paired_accuracy_change(
    items: pd.DataFrame, base: pd.DataFrame, *, n_perm: int = 5000, seed: int = 0
) -> pd.DataFrame:
    """Accuracy change ``items`` − ``base`` on the same items, pooled over tasks.

    Both frames come from ``evaluate_zeroshot(..., return_items=True)`` (``task,
    item, correct, correct_norm``). One row per metric (``acc``, ``acc_norm``):
    ``delta`` in points with a bootstrap ``ci_low``/``ci_high``, the sign-flip
    ``p`` (:func:`tlgeo.stats.paired_test`, items weighted equally) and ``n``
    items. Differing item sets raise ``ValueError``.
    """
    from ..stats.resampling import paired_test

    key = ["task", "item"]
    a, b = items.set_index(key).sort_index(), base.set_index(key).sort_index()
    if not a.index.equals(b.index):
        raise InputError("paired comparison needs the same (task, item) pairs in both frames")
    if a.empty:
        raise InputError("no items to compare")
    rows = []
    for metric, col in (("acc", "correct"), ("acc_norm", "correct_norm")):
        d = a[col].astype(float).to_numpy() - b[col].astype(float).to_numpy()
        t = paired_test(d, n_perm=n_perm, seed=seed)
        rows.append(
            {
                "metric": metric,
                "delta": 100 * t.estimate,
                "ci_low": 100 * t.ci_low,
                "ci_high": 100 * t.ci_high,
                "p": t.p,
                "n": t.n_texts,
            }
        )
    return pd.DataFrame(rows)
