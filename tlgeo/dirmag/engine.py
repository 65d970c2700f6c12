"""Score sentences clean once, then under many perturbations from the cached prefix.

:func:`clean_pass` tokenises and right-pads the sentences
(:func:`tlgeo.evals.sentences.sentence_batches`), runs them once, keeps the residual entering
the first perturbed block, each sentence's clean negative log-likelihood and
the median norm of the states at the perturbed layers. :func:`perturbed_scores`
resumes from that residual (:func:`tlgeo.hooks.resume.resume_forward`) under a
:class:`~tlgeo.hooks.perturbation.Perturbation`, so a perturbed pass costs only the
blocks from the first perturbed one on.

``reduce``: see :func:`tlgeo.evals.sentences.sentence_nll`. A :class:`SweepGrid`
names the perturbations of a sweep (kinds x deltas x seeds) and runs them, one
resumable row each, with what the caller measures from the scores.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import torch
from jaxtyping import Float
from torch import Tensor

from ..errors import InputError
from ..evals.sentences import REDUCTIONS, Batch, sentence_batches, sentence_nll
from ..geometry.perturb import check_delta
from ..hooks.adapter import HookList
from ..hooks.perturbation import KINDS, Perturbation
from ..hooks.resume import resume_forward
from ..runner.identity import run_identity
from ..runner.results import ResultLog, content_digest
from .paper import PAPER_DELTAS

__all__ = [
    "PAPER_DELTAS",
    "RELATIVE_DELTAS",
    "SweepGrid",
    "delta_grid",
    "CleanPass",
    "clean_pass",
    "perturbed_scores",
    "sentence_batches",
    "sentence_nll",
]

RELATIVE_DELTAS: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1.0)
# A row's key columns that digest what it measured: the sentences' text and the token ids the model read
# (another tokenizer, or BOS or none, reads the same text differently): a changed one is computed again.
CONTENT = ("text_sha1", "tokens")


def delta_grid(
    median_norm: float, absolute: Iterable[float] = PAPER_DELTAS, norm_fractions: Iterable[float] = (0.25, 0.5, 1.0)
) -> tuple[float, ...]:
    """The paper's absolute grid plus deltas of 0.25, 0.5 and 1 x the median state norm, so the
    sweep reaches ``delta / median ||h|| ~ 1`` whatever the model's scale."""
    extra = [round(f * median_norm, 3 if median_norm < 10 else 1) for f in norm_fractions]
    return tuple(sorted({*(float(a) for a in absolute), *(e for e in extra if e > 0)}))


@dataclass(frozen=True)
class SweepGrid:
    """The perturbations of a sweep: ``kinds`` x ``deltas`` x seeds ``42 .. 42 + seeds - 1``.

    ``deltas=None``: :func:`delta_grid` of the clean median norm, i.e. ``absolute``
    and ``norm_fractions`` x that norm (``relative``: :data:`RELATIVE_DELTAS`).
    ``layers=None``: the middle third of the blocks. ``only``: the (kind, seed) work units to
    run, the rest of the grid left out (for a split run that is merged later). The rest as
    :class:`~tlgeo.hooks.perturbation.Perturbation`. Bad values fail at once.
    """

    kinds: tuple[str, ...] = KINDS
    deltas: tuple[float, ...] | None = None
    seeds: int = 5
    layers: int | tuple[int, ...] | None = None
    mode: str = "exact"
    relative: bool = False
    flip: str = "allow"
    absolute: tuple[float, ...] = PAPER_DELTAS
    norm_fractions: tuple[float, ...] = (0.25, 0.5, 1.0)
    only: tuple[tuple[str, int], ...] | None = None  # work units: the (kind, seed) pairs to run (None: all)

    def __post_init__(self):
        kinds = tuple(self.kinds)
        bad = [k for k in kinds if k not in KINDS]
        if bad or not kinds:
            raise InputError(f"unknown perturbation kind(s) {bad or list(kinds)}; choose from {KINDS}")
        object.__setattr__(self, "kinds", kinds)
        if self.only is not None:
            object.__setattr__(self, "only", tuple((str(k), int(i)) for k, i in self.only))
        if not isinstance(self.seeds, int) or isinstance(self.seeds, bool) or self.seeds < 1:
            raise InputError(f"seeds must be a positive integer, got {self.seeds!r}")
        if self.deltas is not None:
            deltas = tuple(float(check_delta(d)) for d in self.deltas)
            if not deltas:
                raise InputError("empty delta grid")
            object.__setattr__(self, "deltas", deltas)
        if isinstance(self.layers, Iterable):
            object.__setattr__(self, "layers", tuple(self.layers))
        for name in ("absolute", "norm_fractions"):
            object.__setattr__(self, name, tuple(float(check_delta(d)) for d in getattr(self, name)))
        Perturbation("angle", 0.0, layers=self.layers, mode=self.mode, flip=self.flip)  # mode, flip

    def chosen_layers(self, cfg) -> list[int]:
        return Perturbation("angle", 0.0, layers=self.layers).chosen_layers(cfg)

    def resolved_deltas(self, median_norm: float) -> tuple[float, ...]:
        if self.deltas is not None:
            return self.deltas
        return RELATIVE_DELTAS if self.relative else delta_grid(median_norm, self.absolute, self.norm_fractions)

    def settings(self, cfg) -> dict:
        """The grid's part of a result row's key (besides kind, delta and seed)."""
        return {
            "mode": self.mode,
            "flip": self.flip,
            "layers": self.chosen_layers(cfg),
            "relative": self.relative,
            "draws": "per_batch" if self.mode == "exact" else "shared",
        }

    def run(
        self,
        model,
        clean: "CleanPass",
        measure: Callable[[Perturbation], dict],
        *,
        key: Iterable[str],
        settings: dict,
        log_path: str | os.PathLike | None = None,
        progress: bool = False,
        desc: str = "perturbations",
    ) -> list[dict]:
        """One row per perturbation: its key, then ``measure(perturbation)``, then ``wall_s``.

        ``measure`` scores the clean pass's sentences under the perturbation (e.g. with
        :func:`perturbed_scores`) and returns the row's values. With ``log_path`` each row is
        stored at once and a rerun reads it back instead (``key``: the log's key columns)."""
        key = tuple(key)
        log = (
            ResultLog(log_path, key, identity=run_identity(model).row(), content=[c for c in CONTENT if c in key])
            if log_path is not None
            else None
        )
        layers = tuple(self.chosen_layers(model.cfg))
        deltas = self.resolved_deltas(clean.median_norm)
        grid = [
            (k, d, i)
            for d in deltas
            for k in self.kinds
            for i in range(self.seeds)
            if self.only is None or (k, 42 + i) in self.only
        ]
        if progress:
            from tqdm.auto import tqdm

            grid = tqdm(grid, desc=desc, unit="run")
        rows = []
        for kind, delta, i in grid:
            row_key = {"kind": kind, "delta": delta, "seed": 42 + i, **settings}
            row = log.get(**row_key) if log is not None else None
            if row is None:
                t0 = time.perf_counter()
                pert = Perturbation(
                    kind, delta, seed=42 + i, layers=layers, mode=self.mode, relative=self.relative, flip=self.flip
                )
                row = {**row_key, **measure(pert), "wall_s": time.perf_counter() - t0}
                if log is not None:
                    log.add(row)
            rows.append(row)
        return rows

    def sweep(
        self,
        model,
        sentences: Sequence[str],
        *,
        reduce: str = "mean",
        max_tokens: int = 64,
        batch_size: int = 16,
        keep_all: bool = False,
        keep: Sequence[str] = (),
        extra: "BatchHooks | None" = None,
    ) -> tuple["CleanPass", dict]:
        """The clean pass of ``sentences`` for this grid (:func:`clean_pass`), and the settings part
        of its rows' keys (the grid's, the sentence count, a hash of the sentences and a digest of their token ids)."""
        clean = clean_pass(
            model,
            sentences,
            self.chosen_layers(model.cfg),
            reduce=reduce,
            max_tokens=max_tokens,
            batch_size=1 if self.mode == "faithful" else batch_size,
            keep_all=keep_all,
            keep=keep,
            extra=extra,
        )
        settings = {
            **self.settings(model.cfg),
            "n_sentences": int(clean.scores.numel()),
            "text_sha1": hashlib.sha1("\n".join(sentences).encode("utf-8")).hexdigest()[:16],
            "tokens": content_digest([t[: int(n)] for toks, lengths in clean.batches for t, n in zip(toks, lengths)]),
        }
        return clean, settings


@dataclass
class CleanPass:
    """The clean run of a sentence set, kept for resumed perturbed runs."""

    batches: list[Batch]
    resid: list[Tensor]  # blocks.{first}.hook_resid_pre per batch
    scores: Float[Tensor, "n"]  # clean NLL per sentence (``reduce``)
    median_norm: float  # median ||h|| of the real tokens at the perturbed layers
    first: int
    layers: list[int]
    reduce: str
    kept: list[dict[str, Tensor]] = field(default_factory=list)  # per batch: the clean tensors asked for

    @property
    def n_tokens(self) -> int:
        return int(sum(int(l.sum()) for _, l in self.batches))


BatchHooks = Callable[[int, Batch], HookList]  # (batch index, (tokens, lengths)) -> hooks for that batch


def clean_pass(
    model,
    sentences: Sequence[str],
    layers: list[int],
    *,
    reduce: str = "mean",
    max_tokens: int = 64,
    batch_size: int = 16,
    keep_all: bool = False,
    keep: Sequence[str] = (),
    extra: BatchHooks | None = None,
) -> CleanPass:
    """Run ``sentences`` once; keep what the perturbed runs at ``layers`` need, and the clean
    activations of the hooks named in ``keep`` (for repairs; they stay in memory). ``extra(i,
    batch)``: hooks to run in batch ``i``'s clean forward too (e.g. observers)."""
    if reduce not in REDUCTIONS:
        raise InputError(f"unknown reduce {reduce!r}; choose from {REDUCTIONS}")
    batches = sentence_batches(model, sentences, max_tokens=max_tokens, batch_size=batch_size, keep_all=keep_all)
    first = min(layers)
    names = [f"blocks.{first}.hook_resid_pre"] + [f"blocks.{l}.hook_resid_post" for l in layers] + list(keep)
    resid, scores, norms, kept = [], [], [], []
    with torch.inference_mode():
        for i, (toks, lengths) in enumerate(batches):
            with model.hooks(fwd_hooks=list(extra(i, (toks, lengths))) if extra is not None else []):
                logits, cache = model.run_with_cache(toks, names_filter=names)
            scores.append(sentence_nll(logits, toks, lengths, reduce))
            real = torch.arange(toks.shape[1])[None, :] < lengths[:, None]
            for l in layers:
                norms.append(cache[f"blocks.{l}.hook_resid_post"].float().norm(dim=-1).cpu()[real])
            resid.append(cache[names[0]].clone())
            kept.append({n: cache[n].clone() for n in keep})
            del logits, cache
    return CleanPass(
        batches, resid, torch.cat(scores), float(torch.cat(norms).median()), first, list(layers), reduce, kept
    )


def perturbed_scores(
    model,
    clean: CleanPass,
    pert: Perturbation,
    stats: list[dict] | None = None,
    *,
    hooks: HookList | None = None,
    extra: BatchHooks | None = None,
) -> Float[Tensor, "n"]:
    """Each sentence's NLL (``clean.reduce``) under ``pert``, resumed from the clean prefix.

    Exact mode: each batch draws its own signs and directions (``draw`` = its first
    sentence's index + 1), so that no draw is shared by every batch of one shape. Faithful
    mode: the hooks are made once for all batches (one noise direction per tensor shape
    for the whole sentence set, as the notebook within a seed). Pass ``hooks`` (from
    ``pert.hooks``) to share one draw between calls. ``extra(i, batch)`` adds
    hooks for batch ``i`` after the perturbation's (e.g. a repair from ``clean.kept[i]``)."""
    if min(pert.chosen_layers(model.cfg)) < clean.first:
        raise InputError(f"the perturbation starts before block {clean.first}, where the clean pass was cut")
    per_batch = hooks is None and pert.mode == "exact"
    hooks = pert.hooks(model, stats=stats) if hooks is None and not per_batch else hooks
    out, start = [], 0
    with torch.inference_mode():
        for i, (resid, (toks, lengths)) in enumerate(zip(clean.resid, clean.batches)):
            drawn = dataclasses.replace(pert, draw=start + 1).hooks(model, stats=stats) if per_batch else hooks
            start += len(toks)
            batch_hooks = list(drawn) + (list(extra(i, (toks, lengths))) if extra is not None else [])
            out.append(
                sentence_nll(resume_forward(model, resid, clean.first, batch_hooks), toks, lengths, clean.reduce)
            )
    return torch.cat(out)
