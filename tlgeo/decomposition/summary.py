"""What a directional-decomposition atlas directory shows, next to the paper.

:func:`atlas_summary` reads the headline rows back from an atlas directory's CSVs;
:func:`headline` turns them into the sentences and warnings that open the report,
next to the paper's numbers (:mod:`.paper`; ``PAPER`` is re-exported here). Below
the ``MIN_*`` budgets a result is an indication only. Reads CSVs, runs no model.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from ..runner.analysis import Headline
from .paper import PAPER, PAPER_PROFILE, PAPER_RULER_MODEL, PAPER_SMALL_MODEL, PAPER_ZEROSHOT_MODEL

if TYPE_CHECKING:
    from .atlas import DecompositionBudgets

CHAPTER = "decomposition"  # the atlas chapter these CSVs belong to (config.json budgets)

__all__ = [
    "CHAPTER",
    "PAPER",
    "atlas_summary",
    "headline",
    "indication_note",
    "paper_value",
    "MIN_ZEROSHOT_ITEMS",
    "MIN_RULER_SAMPLES",
    "MIN_HEAD_TEXTS",
    "MIN_PPL_TOKENS",
]


# Below these budgets a result is an indication only: the headline warns, and the
# tables that show it say so (in a column header or the caption).
MIN_ZEROSHOT_ITEMS = 50  # per task
MIN_RULER_SAMPLES = 10  # per task and length
MIN_HEAD_TEXTS = 16  # texts of the head sensitivity map
MIN_PPL_TOKENS = 2048  # tokens of the perplexity comparisons


def indication_note(n: int | None, minimum: int, unit: str) -> str:
    """``" (20 items: indication only)"`` when ``n < minimum``, else ``""``."""
    return f" ({n} {unit}: indication only)" if n is not None and n < minimum else ""


def paper_value(v) -> str:
    """A paper number as published (a table column of strings is not re-rounded), "—" if none."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return v if isinstance(v, str) else f"{v:.2f}" if abs(v) >= 1 else f"{v:.4f}"  # the paper's decimals


def atlas_summary(out: str | Path) -> pd.DataFrame:
    """The headline numbers of a finished (or partial) atlas directory, one row each.

    Columns ``table, row, quantity, value``: ``ppl`` (PPL and ΔPPL per comparison
    condition; ``s_perp=0`` rows from the sweep), ``zeroshot`` (mean accuracy, %),
    ``ruler`` (mean score, %), ``audit`` (%, token mean), ``mlp_carrier`` (Δ mean NLL,
    nats; carrier rows with the narrow block included), ``closed_form`` (max
    abs Δlogit), ``heads`` (share of heads with positive mean alpha). Steps without a
    CSV are left out.
    """
    out = Path(out)
    rows: list[tuple[str, str, str, float]] = []

    def read(name: str) -> pd.DataFrame | None:
        return _read(out, name)

    if (cmp := read("compare")) is not None:
        for r in cmp.itertuples():
            rows += [("ppl", r.condition, "ppl", r.ppl), ("ppl", r.condition, "delta_ppl", r.delta_ppl)]
            if pd.notna(getattr(r, "zeroshot_acc", float("nan"))):
                rows.append(("zeroshot", r.condition, "acc", r.zeroshot_acc))
            if pd.notna(getattr(r, "ruler", float("nan"))):
                rows.append(("ruler", r.condition, "score", r.ruler))
    if (sw := read("sweeps")) is not None:
        for r in sw[(sw["axis"] == "s_par") & (sw["scale"] == 0.0) & sw["site"].isin(["mlp", "block"])].itertuples():
            rows.append(("ppl", f"{r.site} s_par=0", "ppl", r.ppl))
        for r in sw[(sw["axis"] == "s_perp") & (sw["scale"] == 0.0)].itertuples():
            rows.append(("ppl", f"{r.site} s_perp=0", "ppl", r.ppl))
    if (au := read("audit")) is not None:
        for r in au.itertuples():
            for q in ("perturbation", "energy", "retained"):
                rows.append(("audit", r.site, f"{q} %", 100 * getattr(r, f"{q}_mean")))
    if (mc := read("mlp_carrier")) is not None:
        mc = mc[(mc["removal"] != "none") & (mc["narrow"].isin(["-", "include"]))]
        for r in mc.itertuples():
            rows.append(("mlp_carrier", r.label, r.removal, r.delta_loss))
    if (cf := read("closed_form_errors")) is not None:
        logits = cf[(cf["quantity"] == "logits") & cf["variant"].isin(["value_full", "value_excl_self"])]
        for variant, g in logits.groupby("variant", sort=False):
            rows.append(("closed_form", variant, "max abs dlogit", g["max_abs_err"].max()))
    if (ha := read("heads_alpha")) is not None:
        rows.append(("heads", "value_excl_self", "share alpha > 0", float((ha["alpha_mean"] > 0).mean())))
    return pd.DataFrame(rows, columns=["table", "row", "quantity", "value"])


# --------------------------------------------------------------------------- headline


def _num(v: float, digits: int = 3) -> str:
    """A number for a sentence: ``digits`` significant digits, no exponent between 1e-3 and 1e5
    (``165``, ``5.18``, ``0.119``), scientific outside (``8.2e8``, ``5e-5``); a true minus sign."""
    if v is None or not math.isfinite(v):
        return "n/a"
    a = abs(v)
    if a != 0 and (a >= 1e5 or a < 1e-3):
        mant, exp = f"{v:.{max(digits - 2, 0)}e}".split("e")
        t = f"{mant}e{int(exp)}"
    elif a >= 10 ** (digits - 1):
        t = f"{v:.0f}"
    else:
        t = f"{v:.{digits}g}"
    return t.replace("-", "−")


def _signed(v: float, digits: int = 3) -> str:
    t = _num(v, digits)
    return t if t.startswith("−") or t == "n/a" or t == "0" else "+" + t


def _site_of(condition: str) -> str:
    return condition.split(" s_par=")[0]


def _read(out: Path, name: str) -> pd.DataFrame | None:
    """``out/<name>.csv`` as a frame, or None when the step has not written it."""
    path = out / f"{name}.csv"
    return pd.read_csv(path) if path.exists() else None


def _profile_sentence(ps: pd.DataFrame) -> str:
    """Sentence 1: how parallel the updates are (``profile_summary``)."""
    med = ps.groupby("site", sort=False)["parallel_ratio_median"].median().sort_values()
    k, n = int((ps["parallel_ratio_median"] > 1).sum()), len(ps)
    top = ps.loc[ps["parallel_ratio_median"].idxmax()]
    dominates = k > n / 2
    return (
        f"Parallel part: the per-layer median parallel ratio exceeds 1 in {k} of {n} layer-site pairs "
        f"(median over layers: "
        + ", ".join(f"{s} {_num(v, 2)}" for s, v in med.items())
        + f"; largest {_num(top['parallel_ratio_median'], 3)} at {top['site']}, layer {int(top['layer'])}); "
        f"the paper finds that {PAPER_PROFILE}, which this model {'shows' if dominates else 'does not show'}."
    )


def _cheapest_sentence(cmp: pd.DataFrame, skip: int) -> str | None:
    """Sentence 2: the cheapest parallel removal (``compare``), None without ``s_par=0`` rows."""
    zero = cmp[cmp["condition"].str.endswith(" s_par=0")].sort_values("delta_ppl")
    base_ppl = (
        float(cmp.loc[cmp["condition"] == "unedited", "ppl"].iloc[0])
        if (cmp["condition"] == "unedited").any()
        else float("nan")
    )
    if not len(zero):
        return None
    first, rest = zero.iloc[0], zero.iloc[1:]
    text = (
        f"Cheapest parallel removal (s_par = 0, blocks {skip}..): {_site_of(first['condition'])}, "
        f"ΔPPL {_signed(first['delta_ppl'])} on an unedited PPL of {_num(base_ppl)}"
    )
    if len(rest):
        text += "; then " + ", ".join(
            f"{_site_of(c)} {_signed(d)}" for c, d in zip(rest["condition"], rest["delta_ppl"])
        )
    return text + "."


def _exclude_self_sentence(cmp: pd.DataFrame) -> str | None:
    """Sentence 3: exclude-self against the paper's tolerance and the full removal, None without its rows."""
    by = cmp.set_index("condition")["delta_ppl"]
    scales = sorted({c.split("=")[1] for c in cmp["condition"] if "s_par=" in c}, key=float)
    es = [(v, by[f"value_excl_self s_par={v}"]) for v in scales if f"value_excl_self s_par={v}" in by]
    if not es:
        return None
    tol = float(str(PAPER[("ppl", "value_excl_self s_par=0", "delta_ppl")]).strip("< "))
    band = [(v, d) for v, d in es if 0.0 <= float(v) <= 1.0]
    within = all(d < tol for _, d in band)
    text = "Exclude-self removal costs " + " and ".join(f"{_signed(d)} PPL at s_par = {v}" for v, d in es)
    if band:
        text += f", {'within' if within else 'outside'} the paper's band of < {tol:g} PPL point for s_par in [0, 1]"
    full = [(v, d, by[f"value_full s_par={v}"]) for v, d in es if f"value_full s_par={v}" in by]
    if full:
        cheaper = all(d < f for _, d, f in full)
        text += (
            "; the full value-space removal costs "
            + " and ".join(f"{_signed(f)}" for _, _, f in full)
            + (
                ", so exclude-self is the cheaper one, as in the paper"
                if cheaper
                else ", so exclude-self is not cheaper at every scale, unlike the paper"
            )
        )
    return text + "."


def _zeroshot_part(paired: pd.DataFrame | None) -> str | None:
    """The zero-shot half of sentence 4: paired accuracy changes at ``s_par = 0`` next to the paper's."""
    if paired is None or not len(paired):
        return None
    acc = paired[(paired["metric"] == "acc") & paired["condition"].str.endswith(" s_par=0")]
    if not len(acc):
        return None
    p_base = PAPER.get(("zeroshot", "unedited", "acc"))

    def paper_delta(c: str) -> str:
        pv = PAPER.get(("zeroshot", c, "acc"))
        return f"; paper {_signed(pv - p_base, 3)}" if pv is not None and p_base is not None else ""

    return f"zero-shot accuracy change vs unedited over {int(acc['n'].iloc[0])} items, " + ", ".join(
        f"{_site_of(c)} {_signed(d, 2)} points (CI {_signed(lo, 2)} to {_signed(hi, 2)}{paper_delta(c)})"
        for c, d, lo, hi in zip(acc["condition"], acc["delta"], acc["ci_low"], acc["ci_high"])
    )


def _downstream_sentence(zs, paired, rl, val: dict) -> str | None:
    """Sentence 4: downstream, zero-shot (paired changes) and RULER, each next to the paper."""
    parts = []
    small = (zs is not None and len(zs) and int(zs["n"].min()) < MIN_ZEROSHOT_ITEMS) or (
        rl is not None and len(rl) and int(rl["n"].min()) < MIN_RULER_SAMPLES
    )
    if (zero_shot := _zeroshot_part(paired)) is not None:
        parts.append(zero_shot)
    conds = [r for (t, r, q) in PAPER if t == "ruler" and ("ruler", r, "score") in val]
    if conds:
        parts.append(
            "RULER-style score "
            + ", ".join(
                f"{c.replace(' s_par=', ' at ')} {_num(val[('ruler', c, 'score')], 3)} % "
                f"(paper {PAPER[('ruler', c, 'score')]:.2f})"
                for c in conds
            )
        )
    if not parts:
        return None
    return (
        "Downstream"
        + (" (indication only at these budgets)" if small else "")
        + ": "
        + "; ".join(parts)
        + f" — paper models: {PAPER_ZEROSHOT_MODEL} (zero-shot), "
        f"{PAPER_RULER_MODEL} (RULER)."
    )


def _audit_sentence(val: dict) -> str | None:
    """Sentence 5: the post-W_O audit, None unless both audited sites are in ``val``."""
    if ("audit", "value_excl_self", "perturbation %") not in val or ("audit", "attn", "perturbation %") not in val:
        return None
    e = {q: val[("audit", "value_excl_self", f"{q} %")] for q in ("perturbation", "energy", "retained")}
    r = {q: val[("audit", "attn", f"{q} %")] for q in ("perturbation", "energy", "retained")}
    more = e["perturbation"] > r["perturbation"]
    return (
        f"Post-W_O audit (s_par = 0, all blocks): exclude-self removal perturbs the attention output by "
        f"{_num(e['perturbation'])} % (energy {_num(e['energy'])} %, retained {_num(e['retained'])} %), the "
        f"residual edit by {_num(r['perturbation'])} % ({_num(r['energy'])} %, {_num(r['retained'])} %); "
        f"paper ({PAPER_SMALL_MODEL}): {PAPER[('audit', 'value_excl_self', 'perturbation %')]:.2f} % and "
        f"{PAPER[('audit', 'attn', 'perturbation %')]:.2f} % — exclude-self perturbs "
        f"{'more, as in the paper' if more else 'less, unlike the paper'}."
    )


def _closed_form_sentence(out: Path, cf: pd.DataFrame, val: dict) -> str:
    """Sentence 6: the closed form, exact for the value-space variants, exact only along z for attn."""
    exact = cf[cf["variant"].isin(["value_full", "value_excl_self"])]
    worst = float(exact["rel_err"].max()) if len(exact) else float("nan")
    logit = {v: val.get(("closed_form", v, "max abs dlogit")) for v in ("value_full", "value_excl_self")}
    text = (
        "Closed form: editing only the attention diagonal reproduces the value-space edits "
        + ("up to float rounding" if worst < 1e-3 else "NOT exactly")
        + f" (largest relative error {_num(worst, 2)}; max |Δlogit| "
        + " / ".join(f"{_num(x, 2)} {v.replace('value_', '')}" for v, x in logit.items() if x is not None)
        + ")"
    )
    dg = _read(out, "closed_form_diag")
    if dg is not None and (dg["variant"] == "attn").any():
        a = dg[dg["variant"] == "attn"].iloc[0]
        along_ok = a["resid_local_par_rel_err_max"] < 1e-3
        text += (
            f"; the residual (attn) one-coefficient form is {'exact' if along_ok else 'NOT exact'} along z "
            f"(miss along z at most {_num(a['resid_local_par_rel_err_max'], 2)} of ||attn_out||) but "
            f"misses by a median {_num(a['resid_local_rel_err_median'], 2)} ||attn_out|| off z, as expected"
        )
    return text + "."


def _mlp_carrier_sentence(val: dict) -> str | None:
    """Sentence 7: the MLP carrier, None unless every carrier row is in ``val``."""
    labels = ("residual mlp", "h vs x", "y_g vs h_g")
    if not all(("mlp_carrier", l, r) in val for l in labels for r in ("no_para", "no_perp")):
        return None
    para = [val[("mlp_carrier", l, "no_para")] for l in labels]
    perp = [val[("mlp_carrier", l, "no_perp")] for l in labels]
    carrier = all(q > p for p, q in zip(para, perp))

    def ratio(p: float, q: float) -> str:
        return f"×{_num(q / p, 2)}" if p > 0 else "n/a"

    paper = [(PAPER[("mlp_carrier", l, "no_para")], PAPER[("mlp_carrier", l, "no_perp")]) for l in labels]
    return (
        "MLP carrier (Δ mean NLL, nats; residual MLP / h vs x / y_g vs h_g): No-Para "
        + " / ".join(_signed(x) for x in para)
        + ", No-Perp "
        + " / ".join(_signed(x) for x in perp)
        + f" (paper, {PAPER_SMALL_MODEL}: "
        + " / ".join(f"+{p:g}" for p, _ in paper)
        + " and "
        + " / ".join(f"+{q:g}" for _, q in paper)
        + "); No-Perp is "
        + " / ".join(ratio(p, q) for p, q in zip(para, perp))
        + " No-Para (paper "
        + " / ".join(ratio(p, q) for p, q in paper)
        + ")"
        + (
            ", so the perpendicular part carries the MLP, as in the paper."
            if carrier
            else ", so the perpendicular part does not carry the MLP everywhere, unlike the paper."
        )
    )


def _heads_sentence(ha: pd.DataFrame, hs: pd.DataFrame | None) -> str:
    """Sentence 8: the heads' alpha signs and, when measured, their single-head sensitivity."""
    pos, n = int((ha["alpha_mean"] > 0).sum()), len(ha)
    text = (
        f"Heads: {_num(100 * pos / n, 3)} % of heads ({pos} of {n}) have a positive mean exclude-self alpha "
        f"(paper: {PAPER[('heads', 'value_excl_self', 'share alpha > 0')]}"
        f"{'' if 0 < pos < n and min(pos, n - pos) >= 0.1 * n else '; here almost one sign'})"
    )
    if hs is not None and len(hs):
        single = hs[hs["head"].astype(str) != "all"]
        sig = single[single["q"] < 0.05]
        big = single.loc[single["delta_loss"].idxmax()]
        text += (
            f"; {len(sig)} of {len(single)} single-head removals change the loss at BH q < 0.05 "
            f"(largest {_signed(big['delta_loss'], 2)} nats, layer {int(big['layer'])} head {big['head']})"
        )
    return text + "."


def _zeroshot_warning(zs: pd.DataFrame) -> str | None:
    """The warning for zero-shot items per task below :data:`MIN_ZEROSHOT_ITEMS`."""
    n = int(zs["n"].min())
    if n >= MIN_ZEROSHOT_ITEMS:
        return None
    tasks = list(dict.fromkeys(zs["task"]))
    base = zs[zs["condition"] == "unedited"] if "condition" in zs else zs
    p = float(base["acc"].mean()) if len(base) else 0.5
    se = 100 * math.sqrt(max(p * (1 - p), 1e-4) / (n * len(tasks)))
    return (
        f"Zero-shot: {n} items per task ({n * len(tasks)} per condition over {len(tasks)} "
        f"task{'s' if len(tasks) > 1 else ''}): one item moves a task's accuracy by {100 / n:.0f} points "
        "and the mean "
        f"accuracy has a standard error of about ±{se:.0f} points — indication only "
        f"(use at least {MIN_ZEROSHOT_ITEMS} items per task)."
    )


def _head_texts_warning(hs: pd.DataFrame) -> str | None:
    """The warning for head-sensitivity texts below :data:`MIN_HEAD_TEXTS`."""
    n = int(hs["n_texts"].min())
    if n >= MIN_HEAD_TEXTS:
        return None
    floor = 2.0 ** (1 - n)  # every text's loss change of one sign: the exact sign-flip test's smallest p
    passes = floor < 0.05  # BH's smallest q is the floor when every test reaches it
    return (
        f"Head sensitivity: {n} texts per head: the sign-flip p of one head cannot fall below "
        f"{_num(floor, 2)} (every text's loss moving the same way), so "
        + (
            f"a head passes Benjamini–Hochberg over {len(hs)} tests only when nearly every text agrees"
            if passes
            else f"no head can pass Benjamini–Hochberg over {len(hs)} tests"
        )
        + f" — indication only (use at least {MIN_HEAD_TEXTS} texts)."
    )


def _budget_warnings(out: Path, zs, rl, hs, corpus: str) -> list[str]:
    """Warnings where a budget is too small to conclude from (zero-shot, RULER, heads, perplexity)."""
    warnings: list[str] = []
    if zs is not None and len(zs) and (w := _zeroshot_warning(zs)) is not None:
        warnings.append(w)
    if (rl is None and _read(out, "compare_ppl") is not None) or (rl is not None and not len(rl)):  # no RULER
        warnings.append(
            "RULER-style: not run (the atlas runs it only when asked, with --decomposition-ruler-tasks; or every "
            "length is longer than the model's context: see section 3)."
        )
    if rl is not None and len(rl):
        n = int(rl["n"].min())
        if n < MIN_RULER_SAMPLES:
            warnings.append(
                f"RULER-style: {n} sample(s) per task and length: each score moves in steps of "
                f"{100 / n:.0f} points — indication only (use at least {MIN_RULER_SAMPLES})."
            )
    if hs is not None and len(hs) and (w := _head_texts_warning(hs)) is not None:
        warnings.append(w)
    if (cp := _read(out, "compare_ppl")) is not None and len(cp):
        n = int(cp["n_tokens"].iloc[0])
        if n < MIN_PPL_TOKENS:
            warnings.append(
                f"Perplexity: {n} tokens of {corpus}: large ΔPPL differences stand, but differences "
                f"of a point or two are an indication only (use at least {MIN_PPL_TOKENS} tokens)."
            )
    return warnings


def headline(out: str | Path, budgets: DecompositionBudgets | None = None) -> Headline:
    """What the results in ``out`` show against the paper: up to eight sentences, one per
    step that is done (profile, cheapest removal, exclude-self vs full, downstream,
    audit, closed form, MLP carrier, heads), and warnings where a budget is below
    :data:`MIN_ZEROSHOT_ITEMS`, :data:`MIN_RULER_SAMPLES`, :data:`MIN_HEAD_TEXTS` or
    :data:`MIN_PPL_TOKENS`. Every number is read from the CSVs (the budgets actually
    used are read there too; ``budgets`` only fills in ``decomposition_skip_first``)."""
    out = Path(out)
    summary = atlas_summary(out)
    val = {(t, r, q): v for t, r, q, v in summary.itertuples(index=False)}
    conf = json.loads((out / "config.json").read_text()) if (out / "config.json").exists() else {}
    corpus = conf.get("corpus", "the corpus")
    recorded = conf.get("budgets", {}).get(CHAPTER, {})
    skip = budgets.decomposition_skip_first if budgets is not None else recorded.get("decomposition_skip_first", 1)
    sentences: list[str | None] = []
    if (ps := _read(out, "profile_summary")) is not None and len(ps):
        sentences.append(_profile_sentence(ps))
    if (cmp := _read(out, "compare")) is not None and len(cmp):
        sentences += [_cheapest_sentence(cmp, skip), _exclude_self_sentence(cmp)]
    zs, paired, rl = _read(out, "compare_zeroshot"), _read(out, "compare_zeroshot_paired"), _read(out, "compare_ruler")
    sentences += [_downstream_sentence(zs, paired, rl, val), _audit_sentence(val)]
    if (cf := _read(out, "closed_form_errors")) is not None and len(cf):
        sentences.append(_closed_form_sentence(out, cf, val))
    sentences.append(_mlp_carrier_sentence(val))
    ha, hs = _read(out, "heads_alpha"), _read(out, "heads_sensitivity")
    if ha is not None and len(ha):
        sentences.append(_heads_sentence(ha, hs))
    warnings = _budget_warnings(out, zs, rl, hs, corpus)
    return Headline([s for s in sentences if s is not None], warnings)
