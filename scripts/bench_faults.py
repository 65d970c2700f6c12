"""Kills and bad inputs, measured: every analysis on a tiny model SIGKILLed at seeded moments and rerun into
the same folder until it finishes, its tables compared row for row with an uninterrupted run's; each of its tables
cut at a byte and the command rerun (``--cuts``); then random and out-of-range values for every flag of every
command. Run nothing else meanwhile.

    .venv/bin/python scripts/bench_faults.py --out results/faults            # every analysis, 3 series x 5 kills
    .venv/bin/python scripts/bench_faults.py --only dirmag --series 10 --kills 6
    .venv/bin/python scripts/bench_faults.py --markdown results/faults      # the reliability page's numbers

Writes ``kills.csv`` (one row per series: the analysis, the seed, kills that struck a running process, runs,
whether the tables were identical, rows lost, rows extra), ``cuts.csv`` (one row per table cut: where, the rerun's
exit code, whether it rebuilt the uninterrupted run's tables or refused in one line), ``inputs.csv`` (per command:
values tried, one-line errors, valid configs, anything else) and ``provenance.jsonl`` into ``--out``, and prints the
totals the reliability page quotes.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.faults import fuzz  # noqa: E402
from tests.faults.kill import analysis_cases, kill_series, reference_run, truncate_series  # noqa: E402

from tlgeo.runner import provenance  # noqa: E402
from tlgeo.storage import write_csv  # noqa: E402


def markdown(folder: str | Path) -> str:
    """The reliability page's section of measured numbers, from the tables in ``folder``."""
    folder = Path(folder)
    kills, inputs = pd.read_csv(folder / "kills.csv"), pd.read_csv(folder / "inputs.csv")
    cmd = provenance.read(folder)[-1]["command"].replace("tlgeo scripts/", "python scripts/")
    per = (
        kills.groupby("analysis", sort=False)
        .agg(
            series=("seed", "size"),
            kills=("kills_tried", "sum"),
            identical=("identical", "sum"),
            rows_lost=("rows_lost", "sum"),
            rows_extra=("rows_extra", "sum"),
        )
        .reset_index()
    )
    lines = [
        f"Measured by `{cmd}` on `tiny:llama`, one torch thread per run ({folder}/kills.csv, "
        f"{folder}/inputs.csv, with their provenance):",
        "",
        f"- **{int(kills.kills_tried.sum())} kills** struck a running command (alternately at a random moment "
        f"and in the middle of a write), in {len(kills)} series over {kills.analysis.nunique()} analyses, each "
        f"series then rerun into its folder until it finished: **{int(kills.identical.sum())} of {len(kills)}** "
        f"series ended with every table identical to an uninterrupted run's; rows lost "
        f"{int(kills.rows_lost.sum())}, rows extra {int(kills.rows_extra.sum())}.",
        f"- **{int(inputs.tried.sum())} flag values** (random and out of range) over {len(inputs)} commands: "
        f"{int(inputs.one_line_error.sum())} one-line errors before any work, {int(inputs.valid.sum())} valid "
        f"configurations, {int(inputs.other.sum())} anything else (a traceback or an error of several lines).",
        "",
        "| analysis | series | kills | identical | rows lost | rows extra |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r.analysis} | {r.series} | {r.kills} | {r.identical} | {r.rows_lost} | {r.rows_extra} |"
        for r in per.itertuples()
    ]
    return "\n".join(lines) + "\n"


def _parse_args() -> argparse.Namespace:
    """The command line: output folder, model, analyses, kill series, cuts, flag values, ``--markdown``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/bench-faults", help="folder of the tables")
    p.add_argument("--model", default="tiny:llama")
    p.add_argument("--only", default="", help="comma-separated analyses (default: all)")
    p.add_argument("--series", type=int, default=3, help="kill series per analysis")
    p.add_argument("--kills", type=int, default=5, help="kills per series")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--cuts",
        type=int,
        default=1,
        help="per table of every analysis: a cut in half and this many at "
        "a seeded byte, each rerun into its folder (cuts.csv; 0: none)",
    )
    p.add_argument("--inputs", type=int, default=40, help="random flag values per command (0: none)")
    p.add_argument("--markdown", metavar="FOLDER", help="print the reliability page's numbers from FOLDER's tables")
    return p.parse_args()


def _kill_rows(case, tmp: Path, reference, ref_run, args: argparse.Namespace, n_before: int) -> list[dict]:
    """``args.series`` kill series of one analysis, each rerun to the end: one ``kills.csv`` row per series."""
    rows = []
    for i in range(args.series):
        seed = args.seed * 1000 + n_before + len(rows)
        folder = tmp / case.name / f"series{i}"
        shutil.rmtree(folder, ignore_errors=True)
        s = kill_series(case, folder, reference, ref_run, kills=args.kills, seed=seed)
        rows.append(
            {
                "analysis": case.name,
                "seed": seed,
                "kills_tried": s.kills_tried,
                "runs": s.runs,
                "identical": s.comparison.identical,
                "rows_lost": s.comparison.rows_lost,
                "rows_extra": s.comparison.rows_extra,
                "detail": s.comparison.detail,
                "reference_s": round(ref_run.seconds, 2),
                "reference_writes": ref_run.writes,
            }
        )
        print(
            f"{case.name} series {i}: {s.kills_tried} kills, {s.runs} runs, "
            f"{'identical' if s.comparison.identical else 'DIFFERENT: ' + s.comparison.detail}",
            flush=True,
        )
    return rows


def _cut_rows(case, tmp: Path, args: argparse.Namespace, n_before: int) -> list[dict]:
    """Each of one analysis's tables cut and the command rerun: one ``cuts.csv`` row per cut."""
    cuts = []
    for t in truncate_series(
        case,
        tmp / case.name / "reference",
        tmp / case.name / "cut",
        seed=args.seed * 1000 + n_before,
        cuts=args.cuts,
    ):
        cuts.append(
            {
                "analysis": t.case,
                "table": t.table,
                "size": t.size,
                "cut": t.cut,
                "rc": t.rc,
                "ok": t.ok,
                "refused": t.rc == 2,
                "detail": t.comparison.detail if t.comparison else " | ".join(t.errors),
            }
        )
        print(
            f"{case.name} {t.table} cut at {t.cut} of {t.size} bytes: "
            f"{'ok' if t.ok else 'NOT OK: ' + cuts[-1]['detail']}",
            flush=True,
        )
    return cuts


def _print_totals(kills: pd.DataFrame, inputs: pd.DataFrame, cuts: list[dict]) -> None:
    """Print the totals of the kills, the flag values and the cuts (each only when it ran)."""
    if len(kills):
        print(
            f"kills: {int(kills.kills_tried.sum())} tried in {len(kills)} series over {kills.analysis.nunique()} "
            f"analyses; {int(kills.identical.sum())} of {len(kills)} series ended with identical tables; rows lost "
            f"{int(kills.rows_lost.sum())}, rows extra {int(kills.rows_extra.sum())}"
        )
    if len(inputs):
        print(
            f"inputs: {int(inputs.tried.sum())} flag values over {len(inputs)} commands: "
            f"{int(inputs.one_line_error.sum())} one-line errors, {int(inputs.valid.sum())} valid, "
            f"{int(inputs.other.sum())} other"
        )
    if cuts:
        c = pd.DataFrame(cuts)
        print(
            f"cuts: {len(c)} tables cut over {c.analysis.nunique()} analyses: {int(c.ok.sum())} rebuilt to the "
            f"uninterrupted run's tables or refused in one line ({int(c.refused.sum())} refused)"
        )


def main() -> int:
    args = _parse_args()
    if args.markdown:
        print(markdown(args.markdown), end="")
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    only = {s for s in args.only.split(",") if s}
    rows, cuts = [], []
    with tempfile.TemporaryDirectory(prefix="bench-faults-") as tmp:
        for case in analysis_cases(args.model):
            if only and case.name not in only:
                continue
            t0 = time.perf_counter()
            reference, ref_run = reference_run(case, Path(tmp) / case.name / "reference")
            rows += _kill_rows(case, Path(tmp), reference, ref_run, args, len(rows))
            write_csv(out / "kills.csv", pd.DataFrame(rows))
            if args.cuts:
                cuts += _cut_rows(case, Path(tmp), args, len(cuts))
                write_csv(out / "cuts.csv", pd.DataFrame(cuts))
            print(f"{case.name}: {time.perf_counter() - t0:.0f} s", flush=True)
    kills = pd.DataFrame(rows)
    inputs = fuzz.flag_survey(args.inputs, seed=args.seed) if args.inputs else pd.DataFrame()
    if len(inputs):
        write_csv(out / "inputs.csv", inputs)
    provenance.record(out, ["scripts/bench_faults.py", *sys.argv[1:]], vars(args))
    _print_totals(kills, inputs, cuts)
    if cuts and not pd.DataFrame(cuts).ok.all():
        return 1
    return 0 if len(kills) == 0 or (kills.identical.all() and (not len(inputs) or inputs.other.sum() == 0)) else 1


if __name__ == "__main__":
    sys.exit(main())
