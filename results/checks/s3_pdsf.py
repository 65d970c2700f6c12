"""RESULTS.md §3, prediction-anchored subspaces: its claims, each a check over the committed tables it reads with the
counterexamples it must fail on, and the tables the section prints."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from tlgeo.report.claims import Verdict, edit, scale, shift

from .common import (
    ROOT,
    claim,
    PDSF_GEMMA,
    GEMMA_SINGLE,
    GEMMA_GEN,
    PDSF_LAYERS,
    PDSF_SINGLE,
    PDSF_SINGLE_ROWS,
    PDSF_GEN,
    PDSF_GEN_ROWS,
    _near,
)


# -- 3. prediction-anchored subspaces ----------------------------------------------------------------------


def _immediate(summary: pd.DataFrame, condition: str) -> tuple[float, float, float]:
    """A condition's immediate-divergence percent and its 95 % Wilson CI, as the run's summary holds them."""
    r = summary.set_index("condition").loc[condition]
    return float(r["immediate_pct"]), float(r["immediate_ci_low"]), float(r["immediate_ci_high"])


@claim(
    "3.gen-d-as-paper",
    "A persistent rotation of D changes the first generated token for 64.6 % of the 96 SpecB "
    "prompts (95 % Wilson CI 54.6-73.4 %), and the paper's 64.0 % lies inside it.",
    PDSF_GEN,
    false_if=[edit({"condition": "D"}, immediate_ci_low=66.0)],
)
def _(s):
    from tlgeo.pdsf.paper import PAPER_DIVERGENCE

    pct, lo, hi = _immediate(s, "D")
    n = int(s.set_index("condition").loc["D", "n"])
    return Verdict(
        _near(pct, 64.6, 1)
        and n == 96
        and _near(lo, 54.6, 1)
        and _near(hi, 73.4, 1)
        and lo <= PAPER_DIVERGENCE["D"][0] <= hi,
        f"{pct:.1f} %, CI {lo:.1f}-{hi:.1f}",
    )


@claim(
    "3.gen-hierarchy-compressed",
    "The paper's later divergence of S and later still of the top of F is not "
    "SmolLM2's: the top of F diverges at once for 59.4 % (CI 49.4-68.7 %, the paper's 23.1 % far outside), "
    "more often than S (35.4 %; exact McNemar test over the same prompts, p < 0.001).",
    PDSF_GEN,
    PDSF_GEN_ROWS,
    false_if=[edit({"condition": "S"}, table=1, immediate=True, says="S diverges at once for every prompt")],
)
def _(s, gen):
    from scipy.stats import binomtest

    from tlgeo.pdsf.paper import PAPER_DIVERGENCE

    pct, lo, hi = _immediate(s, "F_top")
    s_pct = _immediate(s, "S")[0]
    a = gen[gen["condition"] == "F_top"].set_index("prompt")["immediate"].astype(bool)
    b = gen[gen["condition"] == "S"].set_index("prompt")["immediate"].astype(bool)
    only_f, only_s = int((a & ~b).sum()), int((~a & b).sum())
    p = binomtest(only_f, only_f + only_s).pvalue
    return Verdict(
        _near(pct, 59.4, 1)
        and _near(s_pct, 35.4, 1)
        and _near(lo, 49.4, 1)
        and _near(hi, 68.7, 1)
        and not lo <= PAPER_DIVERGENCE["F_top"][0] <= hi
        and p < 0.001
        and only_f > only_s,
        f"discordant prompts: F-top only {only_f}, S only {only_s}, p {p:.2g}",
    )


@claim(
    "3.gen-random",
    "Even the random subspace of D's rank diverges at once for 21.1 % of the prompts whose "
    "continuation it changes (CI 14.1-30.3 %; the paper's 4.5 % outside).",
    PDSF_GEN,
    false_if=[edit({"condition": "random"}, immediate_ci_low=4.0)],
)
def _(s):
    from tlgeo.pdsf.paper import PAPER_DIVERGENCE

    pct, lo, hi = _immediate(s, "random")
    return Verdict(
        _near(pct, 21.1, 1) and _near(lo, 14.1, 1) and _near(hi, 30.3, 1) and PAPER_DIVERGENCE["random"][0] < lo,
        f"CI {lo:.1f}-{hi:.1f}",
    )


@claim(
    "3.frame-shift-base",
    "The lexical frame-shift proxy counts 84.4 % of SmolLM2's unedited SpecB continuations "
    "as shifted (Gemma-3-270M: 82.3 %), and every condition's rate lies within 11 points of that base rate on both "
    "models.",
    PDSF_GEN,
    GEMMA_GEN,
    false_if=[edit({"condition": "random"}, frame_shift_pct=60.0)],
)
def _(s, g):
    gap = max((t["frame_shift_pct"] - t["frame_shift_base_pct"]).abs().max() for t in (s, g))
    base = [t["frame_shift_base_pct"] for t in (s, g)]
    return Verdict(
        bool(
            _near(base[0].iloc[0], 84.4, 1)
            and _near(base[1].iloc[0], 82.3, 1)
            and all(b.nunique() == 1 for b in base)
            and gap <= 11
        ),
        f"largest |rate - base rate| {gap:.2f} points",
    )


@claim(
    "3.gemma-random-diverges",
    "In Gemma-3-270M every persistent rotation diverges at once for most prompts, the "
    "random subspace too: 84.4 % (CI 75.8-90.3 %; the paper's 4.5 % far outside), D 100.0 %.",
    GEMMA_GEN,
    false_if=[edit({"condition": "S"}, immediate_pct=50.0)],
)
def _(s):
    from tlgeo.pdsf.paper import PAPER_DIVERGENCE

    pct, lo, hi = _immediate(s, "random")
    d = _immediate(s, "D")[0]
    return Verdict(
        bool(
            _near(pct, 84.4, 1)
            and _near(lo, 75.8, 1)
            and _near(hi, 90.3, 1)
            and _near(d, 100.0, 1)
            and PAPER_DIVERGENCE["random"][0] < lo
            and (s["immediate_pct"] > 80).all()
        ),
        f"immediate {s.set_index('condition')['immediate_pct'].round(1).to_dict()}",
    )


@claim(
    "3.gemma-any-edit",
    "One edit moves Gemma's next token whatever it rotates: at state 2 a random rotation "
    "changes the argmax for 94.6 % of the prompts (3.99 nats), and F-transplant is again the smallest edit (0.299 "
    "nats).",
    GEMMA_SINGLE,
    false_if=[edit({"condition": "random_rotate"}, kl_mean=0.1)],
)
def _(s):
    t = s.set_index("condition")
    rnd, tr = t.loc["random_rotate"], t.loc["F_transplant"]
    return Verdict(
        bool(
            _near(rnd["flip_pct"], 94.6, 1)
            and _near(rnd["kl_mean"], 3.99, 2)
            and t["kl_mean"].idxmin() == "F_transplant"
            and _near(tr["kl_mean"], 0.299, 3)
            and (s["layer"] == 2).all()
        ),
        f"flips {t['flip_pct'].round(1).to_dict()}",
    )


def _per_prompt_kl(rows: pd.DataFrame, condition: str) -> pd.Series:
    return rows[rows["condition"] == condition].groupby("prompt")["kl"].mean()


@claim(
    "3.sp-mix-largest",
    "One edit at the last prompt token at state 4: mixing F's coordinates moves the next "
    "token most (5.85 nats), more than 40 times a rotation of D or S (0.100, 0.125) and 2,000 times a random "
    "rotation (0.0025).",
    PDSF_SINGLE,
    false_if=[edit({"condition": "D_rotate"}, kl_mean=0.2)],
)
def _(s):
    kl = s.set_index("condition")["kl_mean"]
    return Verdict(
        bool(
            kl.idxmax() == "F_mix"
            and _near(kl["F_mix"], 5.85, 2)
            and _near(kl["D_rotate"], 0.100, 3)
            and _near(kl["S_rotate"], 0.125, 3)
            and _near(kl["random_rotate"], 0.0025, 4)
            and kl["F_mix"] > 40 * max(kl["D_rotate"], kl["S_rotate"])
            and kl["F_mix"] > 2000 * kl["random_rotate"]
            and (s["layer"] == 4).all()
        ),
        f"KL {kl.round(4).to_dict()}",
    )


@claim(
    "3.sp-transplant-reverse",
    "Transplanting another group's prompt's F, the paper's most damaging edit (5.63 "
    "nats), is SmolLM2's least: 0.0014 nats, below even the random rotation (paired over the 224 prompts, "
    "Wilcoxon p < 0.001).",
    PDSF_SINGLE,
    PDSF_SINGLE_ROWS,
    false_if=[shift({"condition": "F_transplant"}, "kl", 0.01, table=1, says="every transplant moves 0.01 nats more")],
)
def _(s, rows):
    from scipy.stats import wilcoxon

    kl = s.set_index("condition")["kl_mean"]
    t, r = _per_prompt_kl(rows, "F_transplant"), _per_prompt_kl(rows, "random_rotate")
    p = wilcoxon(t, r.loc[t.index]).pvalue
    return Verdict(
        bool(
            kl.idxmin() == "F_transplant"
            and _near(kl["F_transplant"], 0.0014, 4)
            and kl["F_transplant"] < kl["random_rotate"]
            and len(t) == 224
            and p < 0.001
            and t.mean() < r.loc[t.index].mean()
        ),
        f"Wilcoxon p {p:.2g}",
    )


@claim(
    "3.sp-s-over-d",
    "A rotation of S moves the next token more than one of D (0.125 against 0.100 nats; paired "
    "over prompts, Wilcoxon p < 0.001), the reverse of the paper's order (D 0.052, S 0.038).",
    PDSF_SINGLE_ROWS,
    false_if=[scale({"condition": "S_rotate"}, "kl", 0.5)],
)
def _(rows):
    from scipy.stats import wilcoxon

    from tlgeo.pdsf.paper import PAPER_SINGLE_PASS_KL

    d, s_ = _per_prompt_kl(rows, "D_rotate"), _per_prompt_kl(rows, "S_rotate")
    p = wilcoxon(s_, d.loc[s_.index]).pvalue
    return Verdict(
        bool(
            _near(s_.mean(), 0.125, 3)
            and _near(d.mean(), 0.100, 3)
            and s_.mean() > d.mean()
            and p < 0.001
            and PAPER_SINGLE_PASS_KL["D_rotate"] > PAPER_SINGLE_PASS_KL["S_rotate"]
        ),
        f"Wilcoxon p {p:.2g}",
    )


@claim(
    "3.tests-bh",
    "The section's three paired tests (McNemar's of F-top against S, Wilcoxon's of the transplant "
    "against the random rotation and of S against D) form one Benjamini-Hochberg family, and each has q < 0.001.",
    PDSF_GEN_ROWS,
    PDSF_SINGLE_ROWS,
    false_if=[
        scale({"condition": "S_rotate"}, "kl", 0.8, table=1, says="S's rotation moves the token as D's"),
        edit(
            lambda g: (g["condition"] == "S") & (g["prompt"] < 20),
            table=0,
            immediate=True,
            says="S diverges at once on the first 20 prompts too",
        ),
    ],
)
def _(gen, rows):
    from scipy.stats import binomtest, wilcoxon

    from tlgeo.stats.multiple import bh_qvalues

    a = gen[gen["condition"] == "F_top"].set_index("prompt")["immediate"].astype(bool)
    b = gen[gen["condition"] == "S"].set_index("prompt")["immediate"].astype(bool)
    only_f, only_s = int((a & ~b).sum()), int((~a & b).sum())
    t, r = _per_prompt_kl(rows, "F_transplant"), _per_prompt_kl(rows, "random_rotate")
    d, s_ = _per_prompt_kl(rows, "D_rotate"), _per_prompt_kl(rows, "S_rotate")
    p = [
        binomtest(only_f, only_f + only_s).pvalue,
        wilcoxon(t, r.loc[t.index]).pvalue,
        wilcoxon(s_, d.loc[s_.index]).pvalue,
    ]
    q = bh_qvalues(np.asarray(p))
    return Verdict(bool((q < 0.001).all()), f"p {np.round(p, 6).tolist()}, q {np.round(q, 6).tolist()}")


@claim(
    "3.interface-small",
    "The interface dimension 1 + PR_D + PR_S is 4.7-17.0 over the 31 states, below the "
    "paper's 20 at every one, and the unembedding direction of the prediction is 78-89 degrees from the top "
    "principal axis at every state.",
    PDSF_LAYERS,
    false_if=[edit({"layer": 5}, interface_dim=21.0)],
)
def _(g):
    return Verdict(
        bool(
            len(g) == 31
            and _near(g["interface_dim"].min(), 4.7, 1)
            and _near(g["interface_dim"].max(), 17.0, 1)
            and (g["interface_dim"] < 20).all()
            and round(g["angle_u_top_axis"].min()) == 78
            and round(g["angle_u_top_axis"].max()) == 89
        ),
        f"angles {g['angle_u_top_axis'].min():.1f}-{g['angle_u_top_axis'].max():.1f}",
    )


def pdsf_table(folder: Path) -> str:
    """RESULTS §3's table: SmolLM2's and Gemma-3-270M's PDSF runs beside the paper's numbers
    (:func:`tlgeo.pdsf.paper.comparison_table`)."""
    from tlgeo.pdsf.paper import comparison_table

    return comparison_table({"SmolLM2-135M": folder, "Gemma-3-270M": ROOT / PDSF_GEMMA})
