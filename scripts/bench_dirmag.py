"""Benchmark: the direction-vs-magnitude sweeps against bare forwards of the same batches.

    .venv/bin/python scripts/bench_dirmag.py [--model smollm2-135m --sentences 64 --blimp-pairs 10 --rounds 3]

One round times, for the LM loss (``lm_damage`` on WikiText sentences) and for
BLiMP (``blimp_damage`` on both sentences of every pair), the sweep (one clean
pass + ``runs`` perturbed passes that resume from the first perturbed block,
scores included) and ``runs + 1`` bare forwards of the same padded batches with
the same score, in alternating order. Prints the per-round ratios per part, for
both parts together, and their medians.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tlgeo.dirmag.damage import lm_damage, wikitext_sentences
from tlgeo.dirmag.engine import SweepGrid, sentence_batches, sentence_nll
from tlgeo.dirmag.syntax import agreement_pairs, blimp_damage
from tlgeo.models import load_model


def bare(model, batches, n: int, reduce: str) -> float:
    t = time.perf_counter()
    with torch.inference_mode():
        for _ in range(n):
            for toks, lengths in batches:
                sentence_nll(model(toks), toks, lengths, reduce)
    return time.perf_counter() - t


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--sentences", type=int, default=64)
    p.add_argument("--blimp-pairs", type=int, default=10, help="pairs per paradigm (6 paradigms; 0: skip BLiMP)")
    p.add_argument("--deltas", default="1,5")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args(argv)
    model = load_model(a.model)
    grid = SweepGrid(deltas=[float(x) for x in a.deltas.split(",")], seeds=a.seeds)
    runs = len(grid.deltas) * len(grid.kinds) * a.seeds
    sentences = wikitext_sentences(a.sentences)
    parts = {
        "loss": (
            lambda: lm_damage(model, sentences, grid, batch_size=a.batch_size),
            sentence_batches(model, sentences, batch_size=a.batch_size),
            "mean",
        )
    }
    if a.blimp_pairs:
        pairs = agreement_pairs(a.blimp_pairs)
        texts = [q.good for q in pairs] + [q.bad for q in pairs]
        parts["blimp"] = (
            lambda: blimp_damage(model, pairs, grid, batch_size=a.batch_size, n_boot=10),
            sentence_batches(model, texts, batch_size=a.batch_size, max_tokens=10**6, keep_all=True),
            "sum",
        )
    lm_damage(model, sentences[:4], SweepGrid(deltas=grid.deltas[:1], seeds=1), batch_size=a.batch_size)  # warm up
    ratios: dict[str, list[float]] = {name: [] for name in [*parts, "all"]}
    for r in range(a.rounds):
        tot_s = tot_b = 0.0
        for name, (run, batches, reduce) in parts.items():
            if r % 2 == 0:
                s, b = timed(run), bare(model, batches, runs + 1, reduce)
            else:
                b, s = bare(model, batches, runs + 1, reduce), timed(run)
            tot_s, tot_b = tot_s + s, tot_b + b
            ratios[name].append(s / b)
            print(
                f"round {r + 1} {name}: sweep {s:.1f} s ({runs} perturbed runs + clean), bare {b:.1f} s "
                f"({runs + 1} forwards): {s / b:.3f}x",
                flush=True,
            )
        ratios["all"].append(tot_s / tot_b)
    sizes = {name: sum(int(l.sum()) for _, l in batches) for name, (_, batches, _) in parts.items()}
    print(f"{a.model}, layers: the middle third; tokens per pass: " + ", ".join(f"{n} {t}" for n, t in sizes.items()))
    for name, rs in ratios.items():
        print(
            f"median ratio {name}: {statistics.median(rs):.3f}x over {a.rounds} rounds "
            f"({', '.join(f'{x:.3f}' for x in rs)})"
        )


if __name__ == "__main__":
    main()
