"""Perplexity of a model under a list of edits, next to the unedited model."""

from __future__ import annotations

import hashlib
import os
from typing import Iterable

import pandas as pd

from ..hooks.edits import SKIP_FIRST, Edit
from ..evals.perplexity import perplexity, scored_tokens
from ..runner.results import ResultLog, content_digest
from ..models import Model
from ..runner.identity import run_identity

__all__ = ["compare_edits", "removal_edits"]

# The edit and the measurement settings: a log written with another text, context or token budget, or
# the same text read into other token ids (another tokenizer, BOS or none), is never mistaken for this run's rows.
KEY = ("site", "s_par", "s_perp", "layers", "skip_first", "heads", "context", "max_tokens", "text_sha1", "tokens")


def removal_edits(sites: Iterable[str], skip_first: int = SKIP_FIRST) -> list[Edit]:
    """For each site: remove the parallel part, then (decomposition sites) the perpendicular."""
    from ..hooks.sites import get_site

    out = []
    for s in sites:
        out.append(Edit(s, s_par=0.0, skip_first=skip_first))
        if get_site(s).is_decomposition:
            out.append(Edit(s, s_perp=0.0, skip_first=skip_first))
    return out


def compare_edits(
    model: Model,
    text: str,
    edits: Iterable[Edit],
    *,
    context: int = 512,
    max_tokens: int | None = 4096,
    batch_size: int = 4,
    log_path: str | os.PathLike | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """Perplexity on ``text`` unedited and under each edit; one row per run.

    With ``log_path`` each row is written as soon as it is measured and rows
    already in the file are not measured again (resume after an interruption).
    Columns: the edit (``site, s_par, s_perp, layers, skip_first, heads``),
    ``ppl, nll, word_ppl, n_tokens, delta_ppl`` (against the unedited row).
    """
    edits = list(edits)
    log = (
        ResultLog(log_path, KEY, identity=run_identity(model).row(), content=("text_sha1", "tokens"))
        if log_path is not None
        else None
    )
    rows: list[dict] = []
    runs: list[tuple[dict, list]] = [(baseline_key(), [])]
    runs += [(e.describe(), e.hooks(model)) for e in edits]  # validates every edit up front
    if progress:
        from tqdm.auto import tqdm

        runs = tqdm(runs, desc="edits", unit="run")
    settings = {
        "context": context,
        "max_tokens": max_tokens,
        "text_sha1": hashlib.sha1(text.encode("utf-8")).hexdigest()[:16],
        "tokens": content_digest(*scored_tokens(model, text, max_tokens)),
    }  # the ids and BOS scored
    for key, hooks in runs:
        key = {**key, **settings}
        row = log.get(**key) if log is not None else None
        if row is None:
            res = perplexity(
                model,
                text,
                context=context,
                max_tokens=max_tokens,
                batch_size=batch_size,
                fwd_hooks=hooks,
            )
            row = {**key, **res.to_dict()}
            if log is not None:
                log.add(row)
        rows.append(row)
    df = pd.DataFrame(rows)
    df["delta_ppl"] = df["ppl"] - df.loc[df["site"] == "none", "ppl"].iloc[0]
    return df


def baseline_key() -> dict:
    return {"site": "none", "s_par": 1.0, "s_perp": 1.0, "layers": "all", "skip_first": 0, "heads": "all"}
