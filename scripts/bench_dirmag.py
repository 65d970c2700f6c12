"""Benchmark: the direction-vs-magnitude damage sweep against bare forwards of the same batches.

    .venv/bin/python scripts/bench_dirmag.py [--model smollm2-135m --sentences 64 --rounds 3]

One round times ``lm_damage`` (one clean pass + ``runs`` perturbed passes that
resume from the first perturbed block, losses included) and ``runs + 1`` bare
forwards of the same padded batches with the same loss computation, in
alternating order. Prints the per-round ratios and their median.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tlgeo.dirmag.damage import lm_damage, wikitext_sentences
from tlgeo.dirmag.engine import SweepGrid, sentence_batches, sentence_nll
from tlgeo.models import load_model


def bare(model, batches, n: int) -> float:
    t = time.perf_counter()
    with torch.inference_mode():
        for _ in range(n):
            for toks, lengths in batches:
                sentence_nll(model(toks), toks, lengths)
    return time.perf_counter() - t


def sweep(model, sentences, deltas, seeds, batch_size) -> float:
    t = time.perf_counter()
    lm_damage(model, sentences, SweepGrid(deltas=deltas, seeds=seeds), batch_size=batch_size)
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--sentences", type=int, default=64)
    p.add_argument("--deltas", default="1,5")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    model = load_model(a.model)
    sentences = wikitext_sentences(a.sentences)
    deltas = [float(x) for x in a.deltas.split(",")]
    runs = len(deltas) * 2 * a.seeds
    batches = sentence_batches(model, sentences, batch_size=a.batch_size)
    sweep(model, sentences[:4], deltas[:1], 1, a.batch_size)  # warm up
    ratios = []
    for r in range(a.rounds):
        if r % 2 == 0:
            s, b = sweep(model, sentences, deltas, a.seeds, a.batch_size), bare(model, batches, runs + 1)
        else:
            b, s = bare(model, batches, runs + 1), sweep(model, sentences, deltas, a.seeds, a.batch_size)
        ratios.append(s / b)
        print(f"round {r + 1}: sweep {s:.1f} s ({runs} perturbed runs + clean), bare {b:.1f} s "
              f"({runs + 1} forwards): {s / b:.3f}x", flush=True)
    tokens = sum(int(l.sum()) for _, l in batches)
    print(f"{a.model}, {len(sentences)} sentences ({tokens} tokens), layers: the middle third; "
          f"median ratio {statistics.median(ratios):.3f}x over {a.rounds} rounds")


if __name__ == "__main__":
    main()
