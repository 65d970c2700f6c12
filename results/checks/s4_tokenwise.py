"""RESULTS.md §4, tokenwise layer maps: its claims, each a check over the committed tables it reads with the
counterexamples it must fail on, and the tables the section prints."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tlgeo.report.claims import Verdict, edit

from .common import ROOT, claim, TOKENWISE_GEMMA, TW_GEOMETRY, TW_CORRELATION, _near


# -- 4. tokenwise layer maps -----------------------------------------------------------------------------------


def _linear(table: pd.DataFrame) -> pd.DataFrame:
    """The local ``linear`` class's rows, by layer (the class RESULTS §4 reads)."""
    return table[table["class"] == "linear"].set_index("layer").sort_index()


def _middle_and_rest(b: pd.DataFrame) -> tuple[float, float]:
    """The median relative error of the middle third of the layers and of the rest."""
    n = len(b)
    middle = b.iloc[n // 3 : 2 * n // 3]
    return float(middle["rel_error"].median()), float(b.drop(middle.index)["rel_error"].median())


def _thirds(b: pd.DataFrame) -> list[float]:
    """The median relative error of the first, middle and last third of the layers."""
    n = len(b)
    return [float(b.iloc[i:j]["rel_error"].median()) for i, j in ((0, n // 3), (n // 3, 2 * n // 3), (2 * n // 3, n))]


def _kl_spearman(c: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Spearman(error, KL at the patched token): every class's rows, and the linear class's."""
    k = c[c["target"] == "kl"]
    return k, k[k["class"] == "linear"]


@claim(
    "4.cos-not-one",
    "SmolLM2: the median cos(Delta_full, Delta_tok) of the linear class is 0.823 over the 30 "
    "layers (0.65-1.00); above 0.95 only at layers 0, 1 and 24.",
    TW_GEOMETRY["smollm2"],
    false_if=[edit({"class": "linear", "layer": 10}, cos_update=0.99)],
)
def _(g):
    b = _linear(g)
    high = [int(layer) for layer in b.index[b["cos_update"] > 0.95]]
    return Verdict(
        bool(
            len(b) == 30
            and _near(b["cos_update"].median(), 0.823, 3)
            and _near(b["cos_update"].min(), 0.65, 2)
            and _near(b["cos_update"].max(), 1.00, 2)
            and high == [0, 1, 24]
        ),
        f"above 0.95 at {high}",
    )


@claim(
    "4.angles-as-paper",
    "SmolLM2: at every layer more than 92 % of the tokens' residuals lie more than 60 "
    "degrees from Delta_tok (median 99.8 %).",
    TW_GEOMETRY["smollm2"],
    false_if=[edit({"class": "linear", "layer": 10}, share_angle_above_60=0.9)],
)
def _(g):
    b = _linear(g)
    return Verdict(
        bool((b["share_angle_above_60"] > 0.92).all() and _near(b["share_angle_above_60"].median(), 0.998, 3)),
        f"min {b['share_angle_above_60'].min():.4f}",
    )


@claim(
    "4.energy-not-little",
    "SmolLM2: the residual holds a median 54.1 % of its energy in Delta_tok's dominant "
    "subspace (90 % of Delta_tok's energy), below 2 % only at the layers where that subspace has rank 1 (2, 11, "
    "28).",
    TW_GEOMETRY["smollm2"],
    false_if=[edit({"class": "linear", "layer": 5}, residual_energy=0.01)],
)
def _(g):
    b = _linear(g)
    low = [int(layer) for layer in b.index[b["residual_energy"] < 0.02]]
    rank1 = [int(layer) for layer in b.index[b["dominant_rank"] == 1]]
    return Verdict(
        bool(_near(b["residual_energy"].median(), 0.541, 3) and low == rank1 == [2, 11, 28]),
        f"below 2 %: {low}; rank 1: {rank1}",
    )


@claim(
    "4.middle-worst",
    "SmolLM2: the middle third of the layers has a larger median relative error than the rest "
    "(0.69 against 0.55 for the linear class: 1.26 times), and than the first and the last third each (0.55 and "
    "0.54).",
    TW_GEOMETRY["smollm2"],
    false_if=[
        edit(
            lambda t: (t["class"] == "linear") & (t["layer"] >= 20),
            rel_error=0.8,
            says="the last third's linear error 0.8",
        )
    ],
)
def _(g):
    b = _linear(g)
    mid, rest = _middle_and_rest(b)
    first, middle, last = _thirds(b)
    return Verdict(
        bool(
            _near(mid, 0.69, 2)
            and _near(rest, 0.55, 2)
            and _near(mid / rest, 1.26, 2)
            and middle > max(first, last)
            and _near(first, 0.55, 2)
            and _near(last, 0.54, 2)
        ),
        f"thirds {first:.3f} / {middle:.3f} / {last:.3f}",
    )


@claim(
    "4.spearman-below-paper",
    "SmolLM2: Spearman(relative error, KL at the patched token) of the linear class is "
    "0.41-0.69 at the 6 patched layers (256 tokens each), and no layer's 95 % CI reaches above 0.78; at layer 0 "
    "the orthogonal, lowrank and global classes reach 0.85-0.88 with CIs above 0.8.",
    TW_CORRELATION["smollm2"],
    false_if=[edit({"target": "kl", "class": "linear", "layer": 6}, ci_high=0.85)],
)
def _(c):
    k, lin = _kl_spearman(c)
    first = k[(k["layer"] == 0) & k["class"].isin(["orthogonal", "lowrank", "global"])]
    return Verdict(
        bool(
            len(lin) == 6
            and (lin["n"] == 256).all()
            and _near(lin["spearman"].min(), 0.41, 2)
            and _near(lin["spearman"].max(), 0.69, 2)
            and lin["ci_high"].max() < 0.78
            and _near(first["spearman"].min(), 0.85, 2)
            and _near(first["spearman"].max(), 0.88, 2)
            and (first["ci_low"] > 0.8).all()
        ),
        f"linear CI highs up to {lin['ci_high'].max():.3f}",
    )


@claim(
    "4.linear-fits-best",
    "SmolLM2: the local linear class has the lowest relative error of the six classes at "
    "27 of the 30 layers (median 0.58); the global linear map at the other three (15, 18, 29).",
    TW_GEOMETRY["smollm2"],
    false_if=[edit({"class": "global", "layer": 10}, rel_error=0.0)],
)
def _(g):
    best = g.loc[g.groupby("layer")["rel_error"].idxmin(), ["layer", "class"]]
    n = int((best["class"] == "linear").sum())
    other = best[best["class"] != "linear"]
    return Verdict(
        bool(
            n == 27
            and _near(_linear(g)["rel_error"].median(), 0.58, 2)
            and set(other["class"]) == {"global"}
            and sorted(other["layer"]) == [15, 18, 29]
        ),
        f"best class per layer: {best['class'].value_counts().to_dict()}",
    )


@claim(
    "4.gemma-closer",
    "Gemma-3-270M is closer to the paper: the median cos(Delta_full, Delta_tok) of the linear "
    "class is 0.952 over its 18 layers (0.79-1.00), above 0.95 at 9 of them; the residual lies more than 60 "
    "degrees from Delta_tok for 74 % of the tokens or more at every layer (median 89.5 %); the middle third fits "
    "worst, a little worse than the last (median relative error 0.40 against 0.30 for the rest: 0.21 for the first "
    "third, 0.39 for the last).",
    TW_GEOMETRY["gemma"],
    false_if=[
        edit(
            lambda t: (t["class"] == "linear") & (t["layer"] >= 12),
            rel_error=lambda x: x + 0.02,
            says="the last third's linear error 0.02 higher",
        )
    ],
)
def _(g):
    b = _linear(g)
    mid, rest = _middle_and_rest(b)
    first, middle, last = _thirds(b)
    return Verdict(
        bool(
            len(b) == 18
            and _near(b["cos_update"].median(), 0.952, 3)
            and _near(b["cos_update"].min(), 0.79, 2)
            and _near(b["cos_update"].max(), 1.00, 2)
            and int((b["cos_update"] > 0.95).sum()) == 9
            and (b["share_angle_above_60"] >= 0.74).all()
            and _near(b["share_angle_above_60"].min(), 0.74, 2)
            and _near(b["share_angle_above_60"].median(), 0.895, 3)
            and _near(mid, 0.40, 2)
            and _near(rest, 0.30, 2)
            and middle > max(first, last)
            and _near(first, 0.21, 2)
            and _near(last, 0.39, 2)
        ),
        f"thirds {first:.3f} / {middle:.3f} / {last:.3f}; cos > 0.95 at {list(b.index[b['cos_update'] > 0.95])}",
    )


@claim(
    "4.gemma-energy",
    "Gemma-3-270M: the residual holds a median 37 % of its energy in Delta_tok's dominant "
    "subspace, "
    "at least 2 % at every layer.",
    TW_GEOMETRY["gemma"],
    false_if=[edit({"class": "linear", "layer": 3}, residual_energy=0.01)],
)
def _(g):
    b = _linear(g)
    return Verdict(
        bool(round(100 * b["residual_energy"].median()) == 37 and (b["residual_energy"] >= 0.02).all()),
        f"min {b['residual_energy'].min():.4f}",
    )


@claim(
    "4.gemma-global-middle",
    "Gemma-3-270M: the local linear class fits best at 13 of the 18 layers, the global "
    "linear map at the other five, layers 4-8.",
    TW_GEOMETRY["gemma"],
    false_if=[edit({"class": "global", "layer": 12}, rel_error=0.0)],
)
def _(g):
    best = g.loc[g.groupby("layer")["rel_error"].idxmin(), ["layer", "class"]]
    other = best[best["class"] != "linear"]
    return Verdict(
        bool(
            int((best["class"] == "linear").sum()) == 13
            and set(other["class"]) == {"global"}
            and sorted(other["layer"]) == [4, 5, 6, 7, 8]
        ),
        str(best["class"].value_counts().to_dict()),
    )


@claim(
    "4.gemma-spearman",
    "Gemma-3-270M: Spearman(relative error, KL at the patched token) of the linear class is "
    "0.23-0.67 at its 6 patched layers (128 tokens each), no CI reaching above 0.76; of every class and layer only "
    "the global map at layer 0 has a CI above 0.7 (0.796, CI 0.73-0.84).",
    TW_CORRELATION["gemma"],
    false_if=[edit({"target": "kl", "class": "lowrank", "layer": 0}, ci_low=0.75)],
)
def _(c):
    k, lin = _kl_spearman(c)
    above = k[k["ci_low"] > 0.7]
    return Verdict(
        bool(
            len(lin) == 6
            and (lin["n"] == 128).all()
            and _near(lin["spearman"].min(), 0.23, 2)
            and _near(lin["spearman"].max(), 0.67, 2)
            and lin["ci_high"].max() < 0.76
            and len(above) == 1
            and above.iloc[0]["class"] == "global"
            and int(above.iloc[0]["layer"]) == 0
            and _near(above.iloc[0]["spearman"], 0.796, 3)
            and _near(above.iloc[0]["ci_low"], 0.73, 2)
            and _near(above.iloc[0]["ci_high"], 0.84, 2)
        ),
        f"CI above 0.7: {len(above)}",
    )


def tokenwise_table(folder: Path) -> str:
    """RESULTS §4's table: SmolLM2's and Gemma-3-270M's tokenwise runs beside the paper's claims, for the local
    linear class (:func:`tlgeo.tokenwise.paper.comparison_table`)."""
    from tlgeo.tokenwise.paper import comparison_table

    runs = {"SmolLM2-135M": folder, "Gemma-3-270M": ROOT / TOKENWISE_GEMMA}
    return comparison_table({k: v for k, v in runs.items() if (Path(v) / "tokenwise_geometry.csv").is_file()})
