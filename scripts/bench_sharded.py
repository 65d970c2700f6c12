"""A model sharded by accelerate against the same model whole, side by side on this machine: each
registered analysis on ``tiny:llama`` at its tiny config (blocks 1-2 offloaded to disk, as in
``tests/distributed/test_sharded.py``), and ``tlgeo ppl`` on SmolLM2-135M with its second half of
blocks offloaded to disk.

    .venv/bin/python scripts/bench_sharded.py [--rounds 2] [--skip-smollm2] [--analyses ppl,pdsf] [--out DIR]

Prints, per analysis and placement, the median seconds whole and sharded (the two alternate in each round) and
their ratio; with ``--out``, appends them to ``DIR/sharded.csv`` with the commit that measured them, and the
run's line to ``DIR/provenance.jsonl``. There is no target: the tables are the same (the test checks them),
the overhead is reading the offloaded weights back and accelerate's per-module hooks. Run nothing else
meanwhile.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tlgeo.models import load_model  # noqa: E402
from tlgeo.report.registry import load_analyses  # noqa: E402
from tlgeo.runner.provenance import record_table  # noqa: E402


def device_map(n_layers: int, first: int) -> dict[str, str]:
    """A Llama-module map: blocks ``first..`` on disk, the rest in CPU memory."""
    out = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.norm": "cpu", "lm_head": "cpu"}
    out.update({f"model.layers.{i}": "disk" if i >= first else "cpu" for i in range(n_layers)})
    return out


def timed(run) -> float:
    t = time.perf_counter()
    run()
    return time.perf_counter() - t


def compare(label: str, whole, sharded, runs: dict, rounds: int) -> list[dict]:
    """Each run of ``runs`` on ``whole`` and on ``sharded``, alternating, ``rounds`` times: a row per run."""
    rows = []
    for name, run in runs.items():
        run(whole)  # warm both (first calls load data, compile, page the offload in)
        run(sharded)
        w, s = [], []
        for r in range(rounds):
            pair = (lambda: w.append(timed(lambda: run(whole))), lambda: s.append(timed(lambda: run(sharded))))
            for f in pair if r % 2 == 0 else pair[::-1]:
                f()
        mw, ms = statistics.median(w), statistics.median(s)
        print(f"{label:>28} {name:>14} | whole {mw:7.3f} s  sharded {ms:7.3f} s  {ms / mw:5.2f}x", flush=True)
        rows.append(
            {
                "placement": label,
                "analysis": name,
                "rounds": rounds,
                "threads": torch.get_num_threads(),
                "whole_s": mw,
                "sharded_s": ms,
                "ratio": ms / mw,
            }
        )
    return rows


def measure(a: argparse.Namespace) -> list[dict]:
    """The timing rows of the placements ``a`` asks for."""
    torch.set_num_threads(2)
    analyses = load_analyses()
    chosen = {n: x for n, x in analyses.items() if a.analyses is None or n in a.analyses}
    with tempfile.TemporaryDirectory() as off:
        whole = load_model("tiny:llama")
        sharded = load_model("tiny:llama", device_map=device_map(3, 1), offload_folder=off)
        runs = {name: (lambda m, x=x: x.run(m, x.config(**x.tiny))) for name, x in chosen.items()}
        rows = compare("tiny:llama, blocks 1-2 on disk", whole, sharded, runs, a.rounds)
    if a.skip_smollm2:
        return rows
    ppl = analyses["ppl"]
    cfg = ppl.config(site="attn", s_perp=0.0, tokens=2048, context=256)
    whole = load_model("smollm2-135m")
    n = whole.cfg.n_layers
    with tempfile.TemporaryDirectory() as off:
        sharded = load_model("smollm2-135m", device_map=device_map(n, n // 2), offload_folder=off)
        rows += compare(
            f"SmolLM2, blocks {n // 2}-{n - 1} on disk",
            whole,
            sharded,
            {"ppl 2048": lambda m: ppl.run(m, cfg)},
            a.rounds,
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--skip-smollm2", action="store_true")
    p.add_argument("--analyses", type=lambda v: v.split(","), default=None, help="comma-separated (default: all)")
    p.add_argument("--out", type=Path, default=None, help="append the timings to OUT/sharded.csv (and provenance)")
    a = p.parse_args(argv)
    rows = measure(a)
    if a.out:
        record_table(
            a.out, "sharded", rows, ["scripts/bench_sharded.py", *(sys.argv[1:] if argv is None else argv)], vars(a)
        )


if __name__ == "__main__":
    main()
