"""Benchmark: the default ``tlgeo atlas`` against its targets, in bare forwards of the same run.

    .venv/bin/python scripts/bench_atlas.py [--model smollm2-135m] [--out DIR] [--against REV]
                                            [--target 200 --stretch 150 --memory-gib 1.8] [--csv FILE]

Runs ``tlgeo atlas --model MODEL`` into an empty folder in a fresh process (every step computed, nothing
resumed), then prints each step's wall time, the same in bare ``4 x 256``-token forwards of the model
measured in that run (the atlas's unit of time: machines of one kind differ ~2x), its share of the run,
the whole run's ratio against ``--target`` (and ``--stretch``) and the process's peak resident memory
against ``--memory-gib``. Exit status 1 where a target is missed.

``--against REV`` runs the atlas of commit ``REV`` first (a git worktree of it, the same Python
environment), then this tree's, one after the other on this machine, and prints the two side by side:
a change's effect measured in one sitting, not against a number from another day. Run nothing else on
the machine meanwhile (two torch processes at once slow each other several-fold).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tlgeo.data import data_dir  # noqa: E402


def run_atlas(model: str, out: Path, source: Path, extra: list[str]) -> tuple[pd.DataFrame, float, float]:
    """``(this run's timings.csv rows, wall seconds, peak RSS in GiB)`` of ``tlgeo atlas`` run from the
    checkout ``source`` into the empty folder ``out``, in a child process of its own."""
    if out.exists():
        shutil.rmtree(out)
    env = {**os.environ, "PYTHONPATH": str(source), "TLGEO_DATA": str(data_dir())}  # a worktree has no ../shared
    cmd = [sys.executable, "-m", "tlgeo", "atlas", "--model", model, "--out", str(out), *extra]
    print(f"[bench] {source.name or source}: {' '.join(cmd[1:])}", flush=True)
    t = time.perf_counter()
    child = subprocess.Popen(cmd, cwd=source, env=env)
    _, status, usage = os.wait4(child.pid, 0)  # this child's own peak, not the largest of every child so far
    wall = time.perf_counter() - t
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"[bench] the atlas of {source} failed (exit status {code}); its output is above")
    timings = pd.read_csv(out / "timings.csv")
    timings = timings[timings["run"] == timings["run"].iloc[-1]]  # this run's rows
    return timings, wall, usage.ru_maxrss / 2**20  # KiB on Linux


def summary(timings: pd.DataFrame) -> tuple[float, float]:
    """``(seconds of every step, the bare forward's seconds)`` of one run's timings."""
    bare = float((timings["seconds"] / timings["bare_forwards"]).median())
    return float(timings["seconds"].sum()), bare


def step_table(runs: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per step, a seconds and a bare-forwards column per run (``runs``: label -> timings)."""
    cols = {}
    for label, t in runs.items():
        t = t.set_index("step")
        cols[f"{label} s"] = t["seconds"].round(1)
        cols[f"{label} bare fwd"] = t["bare_forwards"].round(1)
        cols[f"{label} share %"] = (100 * t["seconds"] / t["seconds"].sum()).round(1)
    return pd.DataFrame(cols)


def commit_of(source: Path) -> tuple[str, bool]:
    """``(the commit checked out in source, whether its tree has changes not committed)``."""
    head = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    dirty = subprocess.run(
        ["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    ).stdout
    return head.strip(), bool(dirty.strip())


STEP_NAMES = {
    "dirmag": "direction vs magnitude",
    "pdsf": "PDSF",
    "mlp_carrier": "the MLP carrier",
    "closed_form": "the closed form",
}


def markdown(csv: str | Path) -> str:
    """The atlas page's paragraph on what the atlas costs, from a committed step table and its totals."""
    csv = Path(csv)
    steps = pd.read_csv(csv, index_col=0)
    runs = pd.read_csv(csv.with_name(f"{csv.stem}_summary.csv"))
    now, before = runs.iloc[-1], (runs.iloc[0] if len(runs) > 1 else None)
    per_step = steps[f"{now['tree']} bare fwd"].sort_values(ascending=False)
    big = [f"{STEP_NAMES.get(s, s)} {v:.0f}" for s, v in per_step.items() if v >= 5]
    rest = per_step[per_step < 5].sum()
    text = (
        f"Measured by `scripts/bench_atlas.py` (`{csv}`: a fresh process into an empty folder, at commit "
        f"{str(now['commit'])[:7]}{' with changes' if now['dirty'] else ''}): all {len(per_step)} steps took "
        f"**{now['bare_forwards']:.0f}** bare 4×256-token forwards of the model (one took "
        f"{now['bare_forward_s']:.2f} s there, measured before and after the steps; the steps "
        f"{now['steps_s'] / 60:.1f} min), peak resident memory **{now['peak_rss_gib']:.2f} GiB**. By step, in "
        f"bare forwards: {', '.join(big)}, the rest {rest:.0f}."
    )
    if before is not None:
        text += (
            f" The same bench ran the atlas of commit {str(before['commit'])[:7]} just before, on the same "
            f"machine: {before['bare_forwards']:.0f} bare forwards, {before['peak_rss_gib']:.2f} GiB."
        )
    return text + "\n"


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line: model, folders, the commit to compare against, targets, ``--csv``, ``--markdown``."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--out", type=Path, default=None, help="the atlas folder (emptied first; default: a temporary one)")
    ap.add_argument("--against", default=None, help="a commit whose atlas runs first, for a side-by-side comparison")
    ap.add_argument("--target", type=float, default=200.0, help="the whole run, in bare forwards")
    ap.add_argument("--stretch", type=float, default=150.0)
    ap.add_argument("--memory-gib", type=float, default=1.8, help="peak resident memory of the atlas process")
    ap.add_argument(
        "--csv",
        type=Path,
        default=None,
        help="write the step table here, and each run's totals beside it (<name>_summary.csv)",
    )
    ap.add_argument(
        "--markdown",
        type=Path,
        default=None,
        help="print the atlas page's paragraph from a step table this script wrote, and stop",
    )
    ap.add_argument("atlas_args", nargs="*", help="after --: more flags of tlgeo atlas (e.g. -- --steps heads)")
    return ap.parse_args(argv)


def _run_against(a: argparse.Namespace, scratch: Path) -> tuple[tuple[str, bool], pd.DataFrame, float, float]:
    """``(commit, timings, wall s, peak GiB)`` of the atlas of commit ``a.against``, from a worktree removed after."""
    tree = scratch / f"tree-{a.against}"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), a.against],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    try:
        commit = commit_of(tree)
        t, wall, peak = run_atlas(a.model, scratch / "atlas-against", tree, a.atlas_args)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    return commit, t, wall, peak


def _print_results(a: argparse.Namespace, table: pd.DataFrame, totals: dict) -> bool:
    """Print the step table, each run's totals against the targets and the comparison; whether one is missed."""
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(
            f"\nThe atlas of {a.model}, step by step (bare fwd: the step's time in bare 4x256-token forwards of "
            "the same run):\n"
        )
        print(table.to_string())
    print()
    missed = False
    for label, (steps, bare, wall, peak) in totals.items():
        ratio = steps / bare
        print(
            f"{label}: steps {steps:.0f} s = {ratio:.0f} bare forwards of {bare:.2f} s "
            f"(target <= {a.target:.0f}, stretch <= {a.stretch:.0f}); process wall {wall:.0f} s; "
            f"peak RSS {peak:.2f} GiB (target <= {a.memory_gib})"
        )
        if label == "this tree":
            missed = ratio > a.target or peak > a.memory_gib
    if a.against:
        (s0, b0, *_), (s1, b1, *_) = totals[a.against], totals["this tree"]
        print(f"this tree / {a.against}: {(s1 / b1) / (s0 / b0):.2f}x in bare forwards, {s1 / s0:.2f}x in seconds")
    return missed


def _write_csv(a: argparse.Namespace, table: pd.DataFrame, totals: dict, commits: dict) -> None:
    """Write the step table to ``a.csv`` and each run's totals to ``<name>_summary.csv`` beside it."""
    a.csv.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(a.csv)
    pd.DataFrame(
        [
            {
                "tree": label,
                "commit": commits[label][0],
                "dirty": commits[label][1],
                "model": a.model,
                "atlas_args": " ".join(a.atlas_args),
                "steps_s": steps,
                "bare_forward_s": bare,
                "bare_forwards": steps / bare,
                "process_wall_s": wall,
                "peak_rss_gib": peak,
            }
            for label, (steps, bare, wall, peak) in totals.items()
        ]
    ).to_csv(a.csv.with_name(f"{a.csv.stem}_summary.csv"), index=False)


def main(argv: list[str] | None = None) -> int:
    a = _parse_args(argv)
    if a.markdown:
        print(markdown(a.markdown), end="")
        return 0

    scratch = Path(tempfile.mkdtemp(prefix="bench-atlas-"))
    out = a.out or scratch / "atlas"
    runs: dict[str, pd.DataFrame] = {}
    totals: dict[str, tuple[float, float, float, float]] = {}  # label -> (steps s, bare s, wall s, peak GiB)
    commits: dict[str, tuple[str, bool]] = {}  # label -> (commit, dirty)
    try:
        if a.against:
            commits[a.against], t, wall, peak = _run_against(a, scratch)
            runs[a.against] = t
            totals[a.against] = (*summary(t), wall, peak)
        commits["this tree"] = commit_of(ROOT)
        t, wall, peak = run_atlas(a.model, out, ROOT, a.atlas_args)
        runs["this tree"] = t
        totals["this tree"] = (*summary(t), wall, peak)
    finally:
        if a.out is None:
            shutil.rmtree(scratch, ignore_errors=True)

    table = step_table(runs)
    missed = _print_results(a, table, totals)
    if a.csv:
        _write_csv(a, table, totals, commits)
    print("targets met" if not missed else "a target is missed")
    return int(missed)


if __name__ == "__main__":
    raise SystemExit(main())
