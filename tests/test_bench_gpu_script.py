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
