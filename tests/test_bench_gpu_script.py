"""scripts/bench_gpu.py on its tiny shape, on the CPU: the forward table, the analyses, the CUDA check."""

from __future__ import annotations

import contextlib
import csv
import io
import re

import pytest
import torch

from .scripts import load_script

TINY = ["--shape", "tiny", "--device", "cpu", "--dtype", "float32", "--batch", "1", "--seq", "16", "--repeats", "1"]
CHOSEN = ("ppl", "patching")  # every analysis runs on tiny models elsewhere (test_contract, tests/distributed)


@pytest.fixture(scope="module")
def bench():
    return load_script("bench_gpu")


@pytest.fixture(scope="module")
def tiny_run(bench, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_gpu") / "rows.csv"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = bench.main([*TINY, "--analyses", ",".join(CHOSEN), "--out", str(out)])
    return rc, buf.getvalue(), out


def test_tiny_cpu_run_prints_a_ratio_per_site_and_the_chosen_analyses(tiny_run):
    from tlgeo.hooks.sites import DECOMPOSITION_SITES, SITES
    from tlgeo.report.registry import load_analyses

    rc, text, out = tiny_run
    assert rc == 0, text
    rows = {}
    for m in re.finditer(r"^\s+(bare|edit|noop)\s+(\S+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s", text, re.M):
        rows[m[1], m[2]] = (float(m[4]), float(m[5]))
    sites = list(DECOMPOSITION_SITES) + (["diag"] if "diag" in SITES else [])
    assert rows["bare", "-"][1] == 1.0
    for site in sites:
        for kind in ("edit", "noop"):
            seconds, ratio = rows[kind, site]
            assert seconds > 0 and ratio > 0, (kind, site, text)
    assert "target   value_excl_self s_par=0" in text
    for name in CHOSEN:  # each analysis ran: its seconds and ok, or an error line
        m = re.search(rf"^\s+{re.escape(name)}\s+([\d.]+)\s+\S+\s+(ok|error: .+)$", text, re.M)
        assert m, f"no result line for analysis {name!r}:\n{text}"
        assert float(m[1]) >= 0
    with open(out) as f:
        csv_rows = list(csv.DictReader(f))
    assert len(csv_rows) == 1 + 2 * len(sites) + len(load_analyses())  # one row per analysis, run or skipped
    status = {r["name"]: r["status"] for r in csv_rows if r["section"] == "analysis"}
    assert all((status[n] == "ok") == (n in CHOSEN) for n in status), status
    assert {r["section"] for r in csv_rows} == {"forward", "analysis"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_cuda_asked_without_cuda_is_a_one_line_error(bench, capsys):
    rc = bench.main(["--shape", "tiny", "--device", "cuda"])
    err = capsys.readouterr().err.strip()
    assert rc != 0
    assert len(err.splitlines()) == 1 and "CUDA is not available" in err, err


def test_parity_on_one_device_finds_no_difference_and_writes_every_table(bench, tmp_path, capsys):
    """``--parity`` with the CPU on both sides: the same numbers (a run is deterministic), a row per table."""
    from tlgeo.report.registry import load_analyses

    out = tmp_path / "parity.csv"
    assert bench.main(["--shape", "tiny", "--device", "cpu", "--parity", str(out), "--analyses", "ppl,patching"]) == 0
    with open(out) as f:
        rows = list(csv.DictReader(f))
    registered = load_analyses()
    made = {(r["analysis"], r["table"]) for r in rows}
    for name in ("ppl", "patching"):
        assert {t.name for t in registered[name].result.TABLES} >= {t for a, t in made if a == name}
        assert any(a == name for a, _ in made)
    assert all(r["status"] == "ok" and float(r["max_diff"]) == 0.0 and int(r["cells"]) > 0 for r in rows), rows


def test_table_difference_and_folder_comparison_see_a_changed_cell(bench, tmp_path):
    import pandas as pd

    a = pd.DataFrame({"layer": [0, 1], "x": [0.5, 200.0], "name": ["u", "v"], "device": ["cpu", "cpu"]})
    b = a.assign(x=[0.5 + 1e-3, 200.0 * (1 + 1e-2)], device="cuda")
    n, worst, col = bench._table_difference(a, b, {"device"})
    assert (n, col) == (4, "x") and worst == pytest.approx(1e-2)  # relative above 1, absolute below
    assert bench._table_difference(a, b.assign(name=["u", "w"]), {"device"})[1] == float("inf")
    assert bench._table_difference(a, b.iloc[:1], set())[1] == float("inf")
    (tmp_path / "c").mkdir(), (tmp_path / "g").mkdir()
    a.to_csv(tmp_path / "c" / "t.csv", index=False)
    b.to_csv(tmp_path / "g" / "t.csv.gz", index=False)
    a.to_csv(tmp_path / "c" / "t.csv.gz", index=False)
    rows = {r["table"]: r for r in bench.compare_folders(tmp_path / "c", tmp_path / "g")}
    assert rows["t.csv.gz"]["max_diff"] == pytest.approx(1e-2)
    assert rows["t.csv"]["max_diff"] == float("inf") and "only in" in rows["t.csv"]["column"]


def test_the_gpu_paragraph_says_what_the_committed_h200_tables_hold():
    """docs/cli.md's findings of the H200 run, checked on results/bench-gpu/ (the page quotes none of its numbers:
    the run did not record its commit, tests/test_docs_numbers.py)."""
    from pathlib import Path

    import pandas as pd

    root = Path(__file__).resolve().parents[1]
    text = " ".join((root / "docs" / "cli.md").read_text().split())
    res = root / "results" / "bench-gpu"
    fwd = pd.read_csv(res / "h200-llama-8b-forwards.csv").query("section == 'forward'")
    edit = fwd.query("name == 'edit'").set_index("site")
    assert edit.loc["value_excl_self", "ratio"] > load_script("bench_gpu").TARGET_RATIO
    assert "the edit overhead of `value_excl_self` on the bare bf16 forward was above its target" in text
    ana = pd.read_csv(res / "h200-llama-8b-analyses.csv").query("section == 'analysis'")
    assert set(ana.query("status != 'ok'").name) == {"compression"}
    assert "every analysis ran at the 8B shape, except compression" in text
    par = pd.read_csv(res / "h200-parity.csv")
    assert (par.status == "ok").all() and par.analysis.nunique() == len(ana) - 1
    rounding = par[~par.analysis.isin(["patching", "geometries"])]
    assert rounding.max_diff.max() < 1e-4 and par.max_diff.max() >= 1e-4
    assert set(par[par.max_diff >= 1e-4].analysis) <= {"patching", "geometries"}
    atlas = pd.read_csv(res / "h200-tiny-atlas-vs-cpu.csv").set_index("table")
    assert atlas.loc["pdsf_layers.csv", "column"] == "pr_F" and atlas.loc["pdsf_layers.csv", "max_diff"] == 1.0
    assert "the CPU and GPU tables agreed up to float rounding, except" in text
