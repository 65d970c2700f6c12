"""Killed at seeded moments and rerun into the same folder, a command ends with the tables of an
uninterrupted run, row for row; a full disk and a second writer are each one line before anything is
lost. The larger numbers: ``scripts/bench_faults.py``."""

from __future__ import annotations

import pytest

from tlgeo.storage import folder_lock

from .kill import analysis_cases, compare, kill_series, read_tables, reference_run, run_once, run_ranks

# (analysis, seed): a short seeded set (with the geometries case below); every analysis, hundreds of kills:
# scripts/bench_faults.py
SHORT = (("dirmag", 12),)


@pytest.fixture(scope="module")
def cases():
    return {c.name: c for c in analysis_cases()}


@pytest.fixture(scope="module")
def references(cases, tmp_path_factory):
    """Each case's uninterrupted run, made once: ``name -> (tables, run)``."""
    made = {}

    def get(name):
        if name not in made:
            get.folders[name] = tmp_path_factory.mktemp("reference") / name
            made[name] = reference_run(cases[name], get.folders[name])
        return made[name]

    get.folders = {}  # each case's folder
    return get


@pytest.mark.parametrize("name,seed", SHORT)
def test_killed_and_rerun_gives_the_uninterrupted_tables(cases, references, tmp_path, name, seed):
    case = cases[name]
    reference, ref_run = references(name)
    assert reference and ref_run.writes > 2, ref_run
    series = kill_series(case, tmp_path / "killed", reference, ref_run, kills=2, seed=seed, mode="mixed")
    assert series.kills_tried >= 1, series  # at least one kill struck a running process
    assert series.comparison.identical, series.comparison.detail


def test_a_full_disk_is_one_line_and_a_rerun_with_space_resumes(cases, references, tmp_path):
    case = cases["dirmag"]
    reference, _ = references("dirmag")
    out = tmp_path / "full"
    r = run_once(case, out, fsize=4096, expect_error=True)  # no file of this run may grow past 4 KiB
    err = [line for line in r.log.splitlines() if "error:" in line]
    assert r.rc == 2 and len(err) == 1, r.log
    assert f"over the file-size limit in {out}" in err[0] and "needs" in err[0] and "rerun" in err[0], err[0]
    log = out / "dirmag_damage.jsonl"
    kept = log.read_text().splitlines()
    assert kept and log.read_bytes().endswith(b"\n")  # the rows saved before are whole
    again = run_once(case, out)
    assert f"resumed {len(kept)} rows from {log}" in again.log, again.log
    assert _equal(read_tables(out), reference)


def test_a_second_writer_is_refused_in_one_line(cases, tmp_path):
    case = cases["decompose"]
    out = tmp_path / "busy"
    with folder_lock(out).acquire("the test's first writer"):
        r = run_once(case, out, expect_error=True)
    err = [line for line in r.log.splitlines() if "error:" in line]
    assert r.rc == 2 and len(err) == 1, r.log
    assert f"{out.resolve()} is being written by process" in err[0] and "the test's first writer" in err[0]
    assert not out.exists() or not any(out.iterdir())  # nothing written; the first writer let go
    assert run_once(case, out).rc == 0


def _equal(a, b) -> bool:
    return set(a) == set(b) and all(
        a[k]
        .sort_values(list(a[k].columns))
        .reset_index(drop=True)
        .equals(b[k].sort_values(list(b[k].columns)).reset_index(drop=True))
        for k in a
    )


def test_geometries_killed_in_its_last_table_write_resumes_to_the_whole_runs_q(cases, references, tmp_path):
    """Found by scripts/bench_faults.py: a geometries run killed after its blocks but in the final save of the
    relations (q over every block) left each block's q over the blocks done so far, and a rerun that resumed
    every block did not write the relations again."""
    reference, ref_run = references("geometries")
    case, out = cases["geometries"], tmp_path / "g"
    assert run_once(case, out, kill_write=ref_run.writes - 2).rc is None  # the relations, rewritten with the final q
    run_once(case, out)
    assert _equal(read_tables(out), reference)


def test_a_dying_rank_is_one_line_and_a_rerun_on_two_ranks_completes(cases, references, tmp_path):
    """Two ranks of one job (as torchrun starts them: its variables, a gloo group), rank 1 killed in the middle of
    its second write: rank 0 says in one line which rank died and what is saved; every saved table is whole; the
    same command on two ranks resumes and ends with the one-process tables."""
    import re

    import pandas as pd

    reference, _ = references("dirmag")
    case, out = cases["dirmag"], tmp_path / "ranks"
    first = run_ranks(case, out, kill_rank=1, kill_write=2)
    said = [line for line in first[0].log.splitlines() if line.startswith("tlgeo dirmag: error:")]
    assert first[1].rc is None and first[0].rc == 1 and len(said) == 1, first[0].log[-3000:]
    assert re.search(r"rank 1 \(pid \d+\) has died", said[0]) and "Rerun the same command to resume" in said[0], said
    for p in out.rglob("*.csv"):
        pd.read_csv(p)  # every saved table is whole: only a hidden temporary file may be half
    again = run_ranks(case, out)
    assert [r.rc for r in again] == [0, 0], again[0].log[-3000:]
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]  # the rerun cleared the dead one's half file
    c = compare(reference, read_tables(out))
    assert c.identical, c.detail


# (analysis, its tables cut): the patching tables, and geometries, which resumes from its tables, not a log;
# every table of every analysis: scripts/bench_faults.py --cuts
CUT = (("patching", ["patching_tasks.csv", "patching_effects.csv"]), ("geometries", ["geometries_relations.csv"]))


@pytest.mark.parametrize("name,tables", CUT)
def test_a_table_cut_at_a_byte_is_rebuilt_to_the_uninterrupted_tables(cases, references, tmp_path, name, tables):
    """Issue 67: a finished folder's results table cut short (in half, then at a seeded byte) and the same command
    rerun into it: the table is rebuilt from the run's logs to the uninterrupted run's tables, or refused in one
    line naming it, never merged with the cut rows (a garbage row, ints read back as floats)."""
    from .kill import truncate_series

    references(name)  # the uninterrupted run (geometries' is shared with the test above)
    got = truncate_series(cases[name], references.folders[name], tmp_path / "cut", seed=67, tables=tables)
    assert len(got) == 2 * len(tables)
    bad = [t for t in got if not t.ok]
    assert not bad, [(t.table, t.cut, t.rc, t.errors, t.comparison and t.comparison.detail) for t in bad]
