"""tlgeo atlas under torchrun: two gloo ranks share out each step's units and rank 0 writes the tables and
the report one process writes; a step that fails on one rank is named on every rank, and what the ranks
finished is kept."""

from __future__ import annotations

import pandas as pd

from ..test_contract import _comparable
from .atlas_worker import SHARED


def test_two_gloo_ranks_share_the_atlas_steps_and_write_the_one_process_tables_and_a_failed_step_is_one_line(
    atlas_dir, torchrun_launch
):
    """Two runs in the torchrun launch: the shared steps, then steps of which one fails on rank 1."""
    from tlgeo.report.atlas import STEPS
    from tlgeo.report.registry import load_steps

    out, done = torchrun_launch
    two, failed = out / "atlas", out / "failed"
    assert done["returncode"] == 0 and (two / "report.html").exists(), done["stderr"][-3000:]
    timings = pd.read_csv(two / "timings.csv")
    assert list(timings["step"]) == [s for s in STEPS if s in SHARED]
    steps = load_steps()
    assert list((two / "ranks").iterdir()), "no rank folder: the units were not shared out"
    assert "over 2 ranks" in done["stdout"]
    tables = sorted(f for name, step in steps.items() if name in SHARED for f in step.files if (atlas_dir / f).exists())
    assert sorted(p.name for p in two.glob("*.csv*") if p.name != "timings.csv") == tables
    keyed = {t.filename: t for name, step in steps.items() if name in SHARED for t in step.analysis.result.TABLES}
    differ = {}
    for name in tables:  # the one-process run of the report tests (one thread per process under make test)
        a, b = pd.read_csv(two / name), pd.read_csv(atlas_dir / name)  # (the atlas_dir of tests/conftest.py)
        clock = [c for c in a.columns if "seconds" in c or c == "wall_s"]  # wall times are not results
        a, b = a.drop(columns=clock), b.drop(columns=clock)
        a, b = _comparable(a, keyed[name]), _comparable(b, keyed[name])  # the ranks' parts merged: rows reordered
        try:
            # rtol 1e-4: the tiny model's induction gap is 0.008, so a patching effect carries the metrics' float32
            # rounding (attribution's gradients summed in another order by another process) times ~100: measured
            # 1.03e-5 relative on this machine
            pd.testing.assert_frame_equal(a, b, check_exact=False, rtol=1e-4, atol=1e-8, obj=name)
        except AssertionError as e:
            differ[name] = str(e).splitlines()[:6]
    assert not differ, differ

    # the failed run: every rank names rank 1's step in one line; rank 0's finished steps are kept
    line = [ln for ln in done["stderr"].splitlines() if ln.startswith("RankFailed: ")]
    assert len(line) == 2 and all("rank 1: audit: ValueError: audit broke on purpose" in ln for ln in line), done[
        "stderr"
    ][-3000:]
    assert (failed / "closed_form_errors.csv").exists() and not (failed / "audit.csv").exists()
    kept = list((failed / "ranks" / "0-of-2").glob("audit*"))  # rank 0's share of the failed step: resumable
    assert kept, sorted(p.name for p in (failed / "ranks" / "0-of-2").iterdir())
