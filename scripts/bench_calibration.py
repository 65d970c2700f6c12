"""How far a patching effect's interval and test can be trusted at the prompt counts people use: coverage and
false positives measured by simulation on real per-prompt metrics.

For each case (a model and a task), one large pool of prompts (``--pool``) is run once: clean, corrupted, and
every cell's patched metric per prompt (exact patching and attribution of every component, layer and head, and
path patching of every block-0 sender into every block-1 receiver's q, k and v), with tlgeo's own sweeps. The
pool is then the population:

* **coverage**: the pool's ratio of means is the cell's true effect; ``--draws`` samples of ``n`` prompts
  (without replacement) each give an interval, and coverage is the share that holds the true effect;
* **false positives**: on the null cells, those whose effect the whole pool cannot tell from 0 (the pool's own
  t-test ``p >= 0.5``: a true effect far below what ``n <= 64`` prompts could detect), with their real
  per-prompt spread, skew and tails; the rate at which the test says ``p < 0.05`` and, separately, at which
  the interval excludes 0 (for Fieller the same rate, by construction). (Shifting every cell's numerators by
  their pool mean was tried as a null and rejected: a cell that is 0 on most prompts becomes a constant, which
  no test can call noise.)
* **agreement**: the share of samples whose interval excludes 0 exactly when ``p < 0.05``.

Coverage is also given over the **tame** cells, whose per-prompt numerators have ``|skewness| <= 3``: a cell
carried by a few prompts (the induction heads' self messages: 0 on a third of the prompts, skewness 10-12, true
effects below 0.004) is covered far less at any ``n <= 64`` by any interval, since most samples of ``n`` hold
none of the prompts that carry it. Each for Fieller's interval with the t-test (``tlgeo.stats.ratio``, what tlgeo
reports) and, on the ``head``
component, for the percentile bootstrap of the ratio tlgeo reported before (``--n-boot`` resamples). Per
(case, method, interval, n): the cells, the mean and the worst cell's coverage, the mean and the worst cell's
false-positive rate, the agreement. Cells whose pool gap or effect is undefined are left out.

    python scripts/bench_calibration.py [--cases zoo] [--pool 1024] [--ns 8,16,32,64] [--draws 400]
        [--out results/calibration] [--threads 1]

With ``--out`` the rows go to ``DIR/calibration.csv`` (led by the commit that measured them) with a provenance
line (``tlgeo.runner.provenance.record_table``); ``docs/statistics.md`` quotes that table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings

import numpy as np
import pandas as pd
import torch

warnings.filterwarnings("ignore")

COMPONENTS = (
    "head",
    "head_par",
    "head_perp",
    "self",
    "nonself",
    "nonself_par",
    "nonself_perp",
    "mlp",
    "mlp_par",
    "mlp_perp",
)
CASES = {  # name: (model, task, direction)
    "induction-llama": ("zoo/induction-llama", "induction", "noise"),
    "induction-gpt": ("zoo/induction-gpt", "induction", "noise"),
    "predecessor-llama": ("zoo/predecessor-llama", "predecessor", "noise"),
    "induction-llama-denoise": ("zoo/induction-llama", "induction", "denoise"),
    "smollm2-ioi": ("smollm2-135m", "ioi", "denoise"),
}
SKEW = 3.0  # a cell whose per-prompt numerators are skewed past this is carried by a few prompts
GROUPS = {"zoo": ["induction-llama", "induction-gpt", "predecessor-llama", "induction-llama-denoise"]}


def _model(name: str):
    from tlgeo.models import load_model
    from tlgeo.train.zoo import zoo_model_dir

    return load_model(str(zoo_model_dir(name.split("/", 1)[1])) if name.startswith("zoo/") else name)


def pool_cells(case: str, pool: int, seed: int = 0, layers=None) -> tuple[np.ndarray, list[dict]]:
    """The pool's per-prompt gap ``den [pool]`` and one dict per cell (method, component, layer, head or path)
    with its per-prompt numerators ``num [pool]``: one run of tlgeo's sweeps over ``pool`` prompts."""
    from tlgeo.patching.attribution import attribution_sweep
    from tlgeo.patching.effects import _num
    from tlgeo.patching.exact import exact_sweep
    from tlgeo.patching.paths import path_runs, path_sweep
    from tlgeo.patching.runs import task_runs
    from tlgeo.patching.tasks import build_task

    name, task_name, direction = CASES[case]
    model = _model(name)
    task = build_task(task_name, model, n=pool, seed=seed)
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    layers = list(range(n_layers)) if layers is None else list(layers)
    comps = list(COMPONENTS) if n_layers <= 4 else ["head"]
    runs = task_runs(model, task, comps, layers)
    clean, corrupted = runs.clean.metric.numpy(), runs.corrupted.metric.numpy()
    den = clean.astype(np.float64) - corrupted.astype(np.float64)
    cells = []
    sweeps = {
        "exact": lambda: exact_sweep(model, runs, comps, layers=layers, direction=direction),
        "attribution": lambda: attribution_sweep(model, runs, comps, layers=layers, direction=direction),
    }
    for method, sweep in sweeps.items():
        for r in sweep():
            cells.append(
                {
                    "method": method,
                    "cell": f"{r['component']} L{r['layer']}H{r['head']}",
                    "component": r["component"],
                    "num": _num(r["patched"], clean, corrupted, direction),
                }
            )
    if n_layers >= 2 and n_layers <= 4:  # paths: every block-0 head into every block-1 head's q, k, v
        pruns = path_runs(model, task, ["head"], [0], [1])
        senders, receivers = [(0, h) for h in range(n_heads)], [(1, h) for h in range(n_heads)]
        for r in path_sweep(model, pruns, senders, receivers, direction=direction):
            cells.append(
                {
                    "method": "paths",
                    "component": "head",
                    "cell": f"L{r['sender_layer']}H{r['sender_head']}->L{r['receiver_layer']}H"
                    f"{r['receiver_head']}.{r['receiver_input']}",
                    "num": _num(r["patched"], clean, corrupted, direction),
                }
            )
    return den, cells


def percentile_bootstrap(num: np.ndarray, den: np.ndarray, n_boot: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """The old interval: the percentile bootstrap of the ratio of means, for samples ``[draws, n]`` at once."""
    draws, n = num.shape
    idx = rng.integers(0, n, size=(draws, n_boot, n))
    a = np.take_along_axis(num[:, None, :].repeat(n_boot, 1), idx, 2).sum(-1)
    b = np.take_along_axis(den[:, None, :].repeat(n_boot, 1), idx, 2).sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(b != 0, a / b, np.nan)
    return np.nanquantile(ratio, 0.025, axis=1), np.nanquantile(ratio, 0.975, axis=1)


def calibrate(den: np.ndarray, cells: list[dict], ns, draws: int, n_boot: int, seed: int = 0) -> list[dict]:
    """Per (method, interval, n): coverage of the pool's effect and false positives on the shifted null."""
    from scipy.stats import skew

    from tlgeo.stats.ratio import ratio_test, ratio_tests

    rng = np.random.default_rng(seed)
    pool = den.size
    out = []
    for n in ns:
        idx = np.argsort(rng.random((draws, pool)), axis=1)[:, :n]  # samples without replacement
        d = den[idx]
        per = {}
        for c in cells:
            num = c["num"]
            if not np.isfinite(num).all() or den.mean() == 0:
                continue
            truth = num.mean() / den.mean()
            null = ratio_test(num, den).p >= 0.5  # the pool cannot tell this cell's effect from 0
            tame = abs(float(skew(num))) <= SKEW if num.std() > 0 else True
            a = num[idx]
            hit = ratio_tests(a, d)
            excl0 = ~((hit["low"] <= 0) & (0 <= hit["high"]))
            rejects = hit["p"] < 0.05
            per.setdefault((c["method"], "fieller"), []).append(
                (
                    ((hit["low"] <= truth) & (truth <= hit["high"])).mean(),
                    null,
                    rejects.mean(),
                    excl0.mean(),
                    (excl0 == rejects).mean(),
                    tame,
                )
            )
            if c["component"] == "head" and c["method"] != "paths" and n_boot:
                lo, hi = percentile_bootstrap(a, d, n_boot, rng)
                excl0 = ~((lo <= 0) & (0 <= hi))
                per.setdefault((c["method"], "percentile"), []).append(
                    (
                        ((lo <= truth) & (truth <= hi)).mean(),
                        null,
                        rejects.mean(),
                        excl0.mean(),
                        (excl0 == rejects).mean(),
                        tame,
                    )
                )
        for (method, name), vals in per.items():
            v = np.array(vals, dtype=np.float64)
            nul, tame = v[v[:, 1] > 0], v[v[:, 5] > 0]
            fpr = lambda col, f: round(float(f(nul[:, col])), 4) if len(nul) else float("nan")  # noqa: E731
            out.append(
                {
                    "method": method,
                    "interval": name,
                    "n": n,
                    "cells": len(v),
                    "null_cells": len(nul),
                    "draws": draws,
                    "coverage": round(float(v[:, 0].mean()), 4),
                    "coverage_worst": round(float(v[:, 0].min()), 4),
                    "tame_cells": len(tame),
                    "coverage_tame": round(float(tame[:, 0].mean()), 4) if len(tame) else float("nan"),
                    "coverage_tame_worst": round(float(tame[:, 0].min()), 4) if len(tame) else float("nan"),
                    "test_fpr": fpr(2, np.mean),
                    "test_fpr_worst": fpr(2, np.max),
                    "interval_fpr": fpr(3, np.mean),
                    "interval_fpr_worst": fpr(3, np.max),
                    "agreement": round(float(v[:, 4].mean()), 4),
                }
            )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="zoo", help=f"comma-separated cases or groups: {sorted(CASES)}, {list(GROUPS)}")
    ap.add_argument("--pool", type=int, default=1024, help="prompts in each case's population")
    ap.add_argument("--ns", default="8,16,32,64", help="sample sizes drawn from the pool")
    ap.add_argument("--draws", type=int, default=400, help="samples per cell and size")
    ap.add_argument("--n-boot", type=int, default=1000, help="resamples of the old percentile bootstrap (0: skip it)")
    ap.add_argument("--layers", default=None, help="blocks patched on a model of more than 4 blocks (e.g. 20-29)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help="append the rows to DIR/calibration.csv with provenance")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    names = [c for g in args.cases.split(",") for c in GROUPS.get(g, [g])]
    unknown = [c for c in names if c not in CASES]
    if unknown:
        ap.error(f"--cases: unknown {unknown}; choose from {sorted(CASES)} or {list(GROUPS)}")
    ns = [int(x) for x in args.ns.split(",")]
    if any(n < 2 or n > args.pool for n in ns):
        ap.error(f"--ns: every size must be in [2, --pool {args.pool}]")
    layers = None
    if args.layers:
        lo, _, hi = args.layers.partition("-")
        layers = list(range(int(lo), int(hi or lo) + 1))
    rows = []
    for case in names:
        t0 = time.perf_counter()
        den, cells = pool_cells(case, args.pool, args.seed, layers)
        t1 = time.perf_counter()
        got = calibrate(den, cells, ns, args.draws, args.n_boot, args.seed)
        model, task, direction = CASES[case]
        for r in got:
            rows.append(
                {
                    "case": case,
                    "model": model,
                    "task": task,
                    "direction": direction,
                    "pool": args.pool,
                    "pool_gap": round(float(den.mean()), 4),
                    **r,
                }
            )
        print(
            f"{case}: {len(cells)} cells over {args.pool} prompts in {t1 - t0:.0f} s, "
            f"simulated in {time.perf_counter() - t1:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    df = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        print(df.drop(columns=["model", "task", "pool"]).to_string(index=False))
    if args.out:
        from tlgeo.runner.provenance import record_table

        path = record_table(
            args.out,
            "calibration",
            rows,
            ["scripts/bench_calibration.py", *sys.argv[1:]],
            settings=json.loads(json.dumps(vars(args))),
        )
        print(f"appended {len(rows)} rows to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
