"""Data-parallel runs (tlgeo.runner.distributed): two gloo processes under torchrun write the tables one
process writes, for every registered analysis and through the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from tlgeo.cli import build_parser
from tlgeo.runner.cliargs import config_from_args
from tlgeo.runner.distributed import Ranks, deal, rank_folder, ranks
from tlgeo.report.registry import load_analyses

from ..test_contract import _comparable
from .worker import CLI

ANALYSES = load_analyses()


def test_units_are_dealt_in_contiguous_runs_of_even_cost_and_every_unit_once():
    units = [("u", i) for i in range(7)]
    parts = [deal(units, r, 3) for r in range(3)]
    assert sum(parts, []) == units  # in order: concatenated in rank order they are the units' order
    assert [len(p) for p in parts] == [2, 3, 2]
    costly = deal(units, 0, 2, costs=[6, 1, 1, 1, 1, 1, 1])  # the first unit alone is half the work
    assert costly == [("u", 0)] and deal(units, 1, 2, costs=[6, 1, 1, 1, 1, 1, 1]) == units[1:]
    assert deal(units[:1], 1, 2) == []  # more ranks than units: nothing for this one
    with pytest.raises(ValueError, match="rank 2 out of 0..1"):
        deal(units, 2, 2)
    with pytest.raises(ValueError, match="one cost >= 0 per unit"):
        deal(units, 0, 2, costs=[1.0])


def test_ranks_come_from_torchrun_environment(monkeypatch, tmp_path):
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    assert ranks() == Ranks(0, 1, 0, 1) and ranks().main
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    r = ranks()
    assert r == Ranks(3, 4, 1, 2) and not r.main
    assert rank_folder(tmp_path, r) == tmp_path / "ranks" / "3-of-4"


# units whose one-process run computes them in one forward with other units' hooks: a forward that
# reads the attention pattern for one site runs attention eagerly for all, so the other sites' float
# sums run in another order (equal to ~1e-7, not bit for bit). The four geometries profile the
# exclude-self site (it reads the pattern) after the other analyses ran on the same model, whose
# attention is then eager or not depending on which of their units this process ran (~3e-8)
NOT_BIT_EXACT = {"ProfileResult", "DecompositionResult", "GeometriesResult"}


def _same_csvs(one: Path, two: Path, result_cls) -> list[str]:
    """Every table file of ``result_cls`` in ``one`` equals the one in ``two`` (rows sorted by key;
    bit for bit, but for :data:`NOT_BIT_EXACT`)."""
    exact = result_cls.__name__ not in NOT_BIT_EXACT
    names = []
    for t in result_cls.TABLES:
        a, b = one / t.filename, two / t.filename
        assert a.exists() == b.exists(), (t.filename, a.exists(), b.exists())
        if a.exists():
            pd.testing.assert_frame_equal(
                _comparable(pd.read_csv(b), t),
                _comparable(pd.read_csv(a), t),
                check_exact=exact,
                rtol=1e-6,
                obj=f"{result_cls.__name__}.{t.name}",
            )
            names.append(t.name)
    return names


def test_two_gloo_ranks_write_what_one_process_writes(llama, tiny_runs, torchrun_launch, tmp_path, monkeypatch):
    out, done = torchrun_launch
    assert done["returncode"] == 0, done["stderr"][-3000:]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each rank: bit for bit needs the same reduction order in every matmul
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # the CLI's --threads 1, here a no-op
    try:
        _compare_with_one_process(llama, tiny_runs, out / "analyses", tmp_path / "one", done["stdout"])
    finally:
        monkeypatch.undo()
        torch.set_num_threads(threads)


def _compare_with_one_process(llama, tiny_runs, two_root: Path, one_root: Path, stdout: str):
    for name, a in ANALYSES.items():
        _, _, one = tiny_runs(name)  # run whole, one thread, into its folder (the contract tests' runs)
        two = two_root / name
        assert len(list((two / "ranks").iterdir())) == 2  # each rank's partial tables and resume logs
        assert _same_csvs(one, two, a.result), f"{name}: no table compared"
    # the command line under torchrun: rank 0 prints and writes, as one process does
    ppl = ANALYSES["ppl"]
    cfg = config_from_args(ppl.config, build_parser().parse_args(CLI))  # the config the ranks' command ran
    assert CLI[0] == ppl.command_name and (cfg.site, cfg.s_par, cfg.layers) == ("value_excl_self", 0.0, (1, 2))
    ppl.run(llama, cfg, out=one_root / "cli")
    assert _same_csvs(one_root / "cli", two_root / "cli", ppl.result) == ["ppl"]
    assert stdout.count("value_excl_self s_par=0.0") == 1, stdout[-2000:]
    # the tokenwise pool: each rank ran the forwards of its half of the windows, then they all-gathered it
    metas = [json.loads(p.read_text()) for p in sorted((two_root / "tokenwise" / "ranks").glob("*/*/meta.json"))]
    assert len(metas) == 2 and all(m["shared"] for m in metas), metas
    (a0, b0), (a1, b1) = metas[0]["collected"], metas[1]["collected"]
    assert a0 == 0 < b0 == a1 < b1 == metas[0]["n_windows"]


def test_the_data_parallel_bench_records_each_command_s_times_with_its_commit(tmp_path, monkeypatch, capsys):
    """scripts/bench_distributed.py's table: one row per command with both times (the process runs stubbed: the
    commands they launch are tested above), their ratio, the tables' agreement and the commit that measured them."""
    from tlgeo.runner.provenance import read

    from ..scripts import load_script

    bench = load_script("bench_distributed")
    launched = []

    def run(cmd, env):  # one process first (4 s), then the ranks (5 s)
        launched.append((cmd, env.get("OMP_NUM_THREADS")))
        return 4.0 if "torch.distributed.run" not in cmd else 5.0

    monkeypatch.setattr(bench, "_run", run)
    monkeypatch.setattr(bench, "_agree", lambda one, two, result: "identical")
    assert bench.main(["--model", "tiny:llama", "--only", "pdsf", "--ranks", "2", "--out", str(tmp_path)]) == 0
    table = pd.read_csv(tmp_path / "distributed.csv")
    assert len(launched) == 2 and "--nproc_per_node=2" in launched[1][0] and "--model" in launched[0][0]
    assert table[["command", "model", "ranks", "one_process_s", "ranks_s", "tables"]].values.tolist() == [
        ["pdsf", "tiny:llama", 2, 4.0, 5.0, "identical"]
    ]
    assert table["ratio"].tolist() == [1.25] and "ratio 1.25" in capsys.readouterr().out
    (line,) = read(tmp_path)
    assert table["commit"].tolist() == [line["git"]["commit"]] and line["settings"]["only"] == "pdsf"
