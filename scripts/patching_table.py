"""The patching results of one or more runs as Markdown tables: per task, the heads with the largest
exact effect and how each one's effect splits over its components; attribution vs exact.

    .venv/bin/python scripts/patching_table.py DIR [DIR ...] [--top 5] [--direction denoise]

Each ``DIR`` holds a ``tlgeo patching`` run (``patching_tasks.csv``, ``patching_effects.csv``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from tlgeo.patching.components import COMPONENTS
from tlgeo.patching.effects import agreement, interactions


def _fmt(row: pd.Series | None) -> str:
    if row is None:
        return "—"
    return f"{row['effect']:+.2f} [{row['ci_low']:+.2f}, {row['ci_high']:+.2f}]"


def tables(out: Path, top: int, direction: str) -> str:
    tasks = pd.read_csv(out / "patching_tasks.csv")
    eff = pd.read_csv(out / "patching_effects.csv")
    eff = eff[eff["direction"] == direction]
    lines = [
        f"### {eff['model'].iloc[0] if len(eff) else out.name} ({direction})",
        "",
        "| task | prompts | clean accuracy | clean metric | corrupted metric | patched |",
        "|---|---|---|---|---|---|",
    ]
    for _, t in tasks.iterrows():
        lines.append(
            f"| {t['task']} | {int(t['n']) if pd.notna(t.get('n')) else '—'} | "
            f"{t.get('accuracy', float('nan')):.2f} | {t.get('clean_metric', float('nan')):.3f} | "
            f"{t.get('corrupted_metric', float('nan')):.3f} | "
            f"{'yes' if t['patched'] else 'no: ' + str(t['reason'])} |"
        )
    for task in eff["task"].unique():
        d = eff[eff["task"] == task]
        ex = d[d["method"] == "exact"]
        method = "exact" if len(ex) else "attribution"
        heads = d[(d["method"] == method) & (d["component"] == "head")]
        best = heads.assign(size=heads["effect"].abs()).nlargest(top, "size")
        comps = [c for c in COMPONENTS if c in set(d["component"]) and COMPONENTS[c].scope == "head"]
        lines += [
            "",
            f"**{task}**: the {top} heads with the largest {method} whole-head effect; each component's "
            f"{method} effect [95 % CI over prompts]",
            "",
            "| head | " + " | ".join(comps) + " |",
            "|---|" + "---|" * len(comps),
        ]
        for _, b in best.iterrows():
            cells = []
            for c in comps:
                m = d[(d["component"] == c) & (d["layer"] == b["layer"]) & (d["head"] == b["head"])]
                m = m[m["method"] == method] if (m["method"] == method).any() else m[m["method"] == "attribution"]
                tag = "" if m.empty or m["method"].iloc[0] == method else " (attr.)"
                cells.append(_fmt(None if m.empty else m.iloc[0]) + tag)
            lines.append(f"| L{int(b['layer'])}H{int(b['head'])} | " + " | ".join(cells) + " |")
        mlp = d[(d["method"] == method) & (d["component"] == "mlp")]
        if len(mlp):
            m = mlp.loc[mlp["effect"].abs().idxmax()]
            lines += ["", f"Largest MLP ({method}): block {int(m['layer'])}, {_fmt(m)}."]
        agree = agreement(d)
        if len(agree):
            lines += [
                "",
                "| component | pairs | Pearson | Spearman | max abs diff (block, head) |",
                "|---|---|---|---|---|",
            ]
            for _, a in agree.iterrows():
                lines.append(
                    f"| {a['component']} | {a['pairs']} | {a['pearson']:.3f} | {a['spearman']:.3f} | "
                    f"{a['max_abs_diff']:.3f} (L{a['worst_layer']}H{a['worst_head']}) |"
                )
        inter = interactions(d)
        if len(inter):
            s = inter.assign(size=inter["interaction"].abs()).groupby("split")["size"].agg(["mean", "max"])
            lines += [
                "",
                "Interactions (exact whole − sum of its parts' exact effects, over blocks and heads): "
                + "; ".join(f"{k}: mean |·| {v['mean']:.3f}, max {v['max']:.3f}" for k, v in s.iterrows())
                + ".",
            ]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dirs", nargs="+", type=Path)
    p.add_argument("--top", type=int, default=5)
    p.add_argument("--direction", default="denoise", choices=("denoise", "noise"))
    args = p.parse_args()
    print("\n\n".join(tables(d, args.top, args.direction) for d in args.dirs))


if __name__ == "__main__":
    main()
