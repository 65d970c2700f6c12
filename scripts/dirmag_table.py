"""Direction-vs-magnitude results of several models side by side with the paper's, as markdown.

    python scripts/dirmag_table.py gpt-LN=results/dirmag-norm-pair-gpt llama-RMS=results/dirmag-norm-pair-llama \\
        SmolLM2=results/dirmag-smollm2-135m Gemma3=results/dirmag-gemma3-270m

Each argument is ``label=directory`` of a ``tlgeo dirmag`` run (its ``dirmag_*.csv``). Rows:
the angle/magnitude loss-damage ratio at the paper's deltas 1, 5, 20 and at 0.25 and 1 x the
median state norm; BLiMP agreement accuracy (clean, and magnitude / angle at deltas 5, 15 and at
0.25 x the norm); causal repair at delta 5 and at 0.5 x the norm; the attention-entropy shift;
the best probe scores. Missing measurements print as "—".
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from tlgeo.dirmag.damage import damage_table

PAPER = {  # Pythia-410M (LayerNorm) unless marked; TinyLlama (RMSNorm) ratios from the notebook's outputs
    "damage ratio at delta 1": "42.9 (TinyLlama 0.2)",
    "damage ratio at delta 5": "5.4 (TinyLlama 1.2)",
    "damage ratio at delta 20": "1.4",
    "BLiMP clean (%)": "89.5",
    "BLiMP at delta 5: magnitude / angle": "69.1 / 87.9",
    "BLiMP at delta 15: magnitude / angle": "53.5 / 67.4",
    "attention repair at delta 5: angle / magnitude (%)": "28.4 / 15.2",
    "norm repair at delta 5: angle / magnitude (%)": "13.7 / 29.9",
    "entropy shift at delta 5: angle / magnitude": "+0.129 / +0.025",
    "POS probe, best layer: direction / magnitude / majority (%)": "81.6 / 29.7 / —",
}


def _read(d: Path, name: str) -> pd.DataFrame | None:
    """The run's rows at absolute deltas (``None`` when there are none)."""
    p = d / f"dirmag_{name}.csv"
    if not p.exists():
        return None
    df = pd.read_csv(p)
    if "relative" in df:
        df = df[~df["relative"].astype(bool)]
    return df if len(df) else None


def _nearest(values, target: float, tol: float = 0.02):
    values = np.asarray(sorted(set(values)), dtype=float)
    if not len(values):
        return None
    i = int(np.argmin(np.abs(values - target)))
    return float(values[i]) if abs(values[i] - target) <= tol * max(abs(target), 1e-9) else None


def column(d: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    dmg = _read(d, "damage")
    if dmg is not None:
        t = damage_table(dmg)
        layers = json.loads(str(dmg["layers"].iloc[0]))
        out["perturbed blocks"] = f"{min(layers)}..{max(layers)}"
        norm = float(dmg["median_norm"].iloc[0])
        out["median state norm"] = f"{norm:.1f}"
        out["clean loss"] = f"{dmg['clean_loss'].iloc[0]:.3f}"
        for label, delta in (("1", 1.0), ("5", 5.0), ("20", 20.0), ("0.25 x norm", 0.25 * norm), ("1 x norm", norm)):
            dl = _nearest(t["delta"], delta)
            if dl is not None:
                r = t[t["delta"] == dl].iloc[0]
                out[f"damage ratio at delta {label}"] = (
                    f"{r['ratio_angle_over_magnitude']:.2f} ({r['angle_damage']:.3g} / {r['magnitude_damage']:.3g})"
                )
    bl = _read(d, "blimp")
    if bl is not None:
        p = bl[bl["paradigm"] == "pooled"]
        out["BLiMP clean (%)"] = f"{p['clean_accuracy'].iloc[0]:.1f} (n={int(p['n'].iloc[0])})"
        norm = float(dmg["median_norm"].iloc[0]) if dmg is not None else np.nan
        for label, delta in (("5", 5.0), ("15", 15.0), ("0.25 x norm", 0.25 * norm)):
            dl = _nearest(p["delta"], delta, tol=0.1)
            if dl is not None:
                g = p[p["delta"] == dl].groupby("kind")["accuracy"].mean()
                out[f"BLiMP at delta {label}: magnitude / angle"] = f"{g['magnitude']:.1f} / {g['angle']:.1f}"
    rp = _read(d, "repair")
    if rp is not None and "repair_layers" in rp:
        # a single perturbed block repaired through its own parts restores nothing: leave those rows out
        single = rp["layers"].astype(str).map(lambda v: len(json.loads(v)) == 1)
        moot = single & rp["repair_layers"].astype(str).isin(["(not recorded)", *rp["layers"].astype(str)])
        rp = rp[~moot] if (~moot).any() else None
    elif rp is not None and rp["layers"].astype(str).map(lambda v: len(json.loads(v)) == 1).all():
        rp = None
    if rp is not None:
        blocks = (
            json.loads(str(rp["repair_layers"].iloc[0]))
            if "repair_layers" in rp and str(rp["repair_layers"].iloc[0]).startswith("[")
            else json.loads(str(rp["layers"].iloc[0]))
        )
        out["repaired blocks"] = f"{min(blocks)}..{max(blocks)}"
        norm = float(dmg["median_norm"].iloc[0]) if dmg is not None else np.nan
        for label, delta in (("5", 5.0), ("0.5 x norm", 0.5 * norm)):
            dl = _nearest(rp["delta"], delta)
            if dl is None:
                continue
            g = rp[rp["delta"] == dl].groupby(["repair", "kind"])["recovery"].mean()
            for repair, name in (("attn", "attention"), ("norm", "norm")):
                if (repair, "angle") in g:
                    out[f"{name} repair at delta {label}: angle / magnitude (%)"] = (
                        f"{g[(repair, 'angle')]:.1f} / {g[(repair, 'magnitude')]:.1f}"
                    )
    en = _read(d, "entropy")
    if en is not None:
        dl = _nearest(en["delta"], 5.0)
        if dl is not None:
            g = en[en["delta"] == dl].groupby("kind")["shift"].mean()
            out["entropy shift at delta 5: angle / magnitude"] = f"{g['angle']:+.4f} / {g['magnitude']:+.4f}"
            out["clean attention entropy"] = f"{en['clean_entropy'].iloc[0]:.3f}"
    pr = _read(d, "probes")
    if pr is not None:
        up = pr[pr["task"] == "upos"].groupby("features")["score"].max()
        out["POS probe, best layer: direction / magnitude / majority (%)"] = (
            f"{up['direction']:.1f} / {up['magnitude']:.1f} / {pr.loc[pr.task == 'upos', 'baseline'].iloc[0]:.1f}"
        )
        dep = pr[pr["task"] == "depth"].groupby("features")["score"].max()
        out["depth probe, best layer: R² x 100, direction / magnitude"] = (
            f"{dep['direction']:.1f} / {dep['magnitude']:.1f}"
        )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="label=directory")
    a = p.parse_args()
    cols = {}
    for spec in a.runs:
        label, _, path = spec.partition("=")
        cols[label] = column(Path(path))
    rows = list(dict.fromkeys(k for c in cols.values() for k in c))
    print("| quantity | " + " | ".join(cols) + " | paper |")
    print("|---|" + "---|" * (len(cols) + 1))
    for r in rows:
        print(f"| {r} | " + " | ".join(c.get(r, "—") for c in cols.values()) + f" | {PAPER.get(r, '—')} |")


if __name__ == "__main__":
    main()
