"""Data-parallel runs against one process, side by side on this machine: each command once as one
process with all cores, once as ``torchrun --nproc_per_node=N`` (each rank cores/N threads), both
from a cold start (imports, model load) to the written CSVs, which must hold the same rows.

    .venv/bin/python scripts/bench_distributed.py                 # SmolLM2: decomposition sweep units, PDSF units
    .venv/bin/python scripts/bench_distributed.py --ranks 2 --only pdsf --out results/bench-distributed

Prints one line per command: seconds alone, seconds with N ranks, their ratio (the target on a 2-core machine
with 2 ranks: <= 1.15), and whether the tables agree (rows sorted by key; bit for bit only at equal thread
counts); with ``--out``, appends them to ``DIR/distributed.csv`` with the commit that measured them (and
provenance). Run nothing else meanwhile.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.test_contract import _comparable  # noqa: E402
from tlgeo.report.registry import load_analyses  # noqa: E402
from tlgeo.runner.provenance import record_table  # noqa: E402

# command, its analysis, flags: a few minutes each on SmolLM2 on 2 cores
BENCHES = {
    "decompose": (
        "decomposition",
        ["--tokens", "2048", "--context", "512", "--profile-tokens", "256", "--sites", "attn,mlp,value_excl_self"],
    ),
    "pdsf": (
        "pdsf",
        [
            "--geometry-per-group",
            "4",
            "--no-complexity",
            "--single-pass-per-group",
            "2",
            "--per-group",
            "1",
            "--new-tokens",
            "16",
            "--conditions",
            "D,S,F_top,random",
        ],
    ),
}


def _run(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr[-3000:]}")
    return time.perf_counter() - t0


def _agree(one: Path, two: Path, result_cls) -> str:
    """``identical`` (rows sorted by key), ``equal to rtol 1e-5`` (one process and the ranks ran
    with other thread counts: float sums in another order) or what differs."""
    exact = True
    for t in result_cls.TABLES:
        a, b = one / t.filename, two / t.filename
        if a.exists() != b.exists():
            return f"DIFFER: {t.filename} written by one side only"
        if not a.exists():
            continue
        x, y = _comparable(pd.read_csv(a), t), _comparable(pd.read_csv(b), t)
        try:
            pd.testing.assert_frame_equal(x, y, check_exact=True)
        except AssertionError:
            exact = False
            try:
                pd.testing.assert_frame_equal(x, y, rtol=1e-5, atol=1e-8)
            except AssertionError as e:
                return f"DIFFER: {t.name}: {str(e).splitlines()[0]}"
    return "identical" if exact else "equal to rtol 1e-5"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--only", default=None, help="comma-separated subset of: " + ",".join(BENCHES))
    p.add_argument("--out", type=Path, default=None, help="append the timings to OUT/distributed.csv (and provenance)")
    a = p.parse_args(argv)
    rows = []
    analyses = load_analyses()
    cores = os.cpu_count() or 1
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    print(
        f"{a.model}, {cores} cores: one process with {cores} threads vs {a.ranks} ranks with "
        f"{max(1, cores // a.ranks)} each"
    )
    for name in a.only.split(",") if a.only else BENCHES:
        analysis, flags = BENCHES[name]
        with tempfile.TemporaryDirectory() as d:
            one, two = Path(d) / "one", Path(d) / "two"
            base = ["-m", "tlgeo", name, "--model", a.model, *flags]
            t1 = _run([sys.executable, *base, "--threads", str(cores), "--out", str(one)], env)
            t2 = _run(
                [
                    sys.executable,
                    "-m",
                    "torch.distributed.run",
                    "--standalone",
                    f"--nproc_per_node={a.ranks}",
                    *base,
                    "--out",
                    str(two),
                ],
                {**env, "OMP_NUM_THREADS": str(max(1, cores // a.ranks))},
            )
            same = _agree(one, two, analyses[analysis].result)
        print(
            f"{name:>6}: one process {t1:6.1f} s | {a.ranks} ranks {t2:6.1f} s | ratio {t2 / t1:.2f} | tables {same}",
            flush=True,
        )
        rows.append(
            {
                "command": name,
                "model": a.model,
                "cores": cores,
                "ranks": a.ranks,
                "threads_per_rank": max(1, cores // a.ranks),
                "one_process_s": t1,
                "ranks_s": t2,
                "ratio": t2 / t1,
                "tables": same,
            }
        )
    if a.out:
        record_table(
            a.out,
            "distributed",
            rows,
            ["scripts/bench_distributed.py", *(sys.argv[1:] if argv is None else argv)],
            vars(a),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
