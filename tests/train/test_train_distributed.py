"""torchrun with 2 CPU processes (gloo): DDP training of a tiny model; both ranks must
end with the same weights, equal to what a single process computes on the same batches."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from . import ddp_worker

REPO = Path(__file__).resolve().parents[2]


def _torchrun(tmp_path: Path, mode: str) -> list[dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(REPO)}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(REPO / "tests" / "train" / "ddp_worker.py"),
        str(tmp_path),
        mode,
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=REPO)
    assert r.returncode == 0, r.stderr[-4000:]
    return _ranks(tmp_path)


def _ranks(out: Path) -> list[dict]:
    return [json.loads((out / f"rank{i}.json").read_text()) for i in range(2)]


def _single_process(out: Path) -> dict:
    """The worker run in this process (torch and tlgeo are imported already) with one thread."""
    import torch

    out.mkdir()
    threads = torch.get_num_threads()
    try:
        ddp_worker.main(str(out), "none")
    finally:
        torch.set_num_threads(threads)
    return json.loads((out / "rank0.json").read_text())


def test_ddp_two_ranks_agree_and_match_single_process(torchrun_launch, tmp_path):
    """The DDP run of the shared torchrun launch (tests/torchrun_worker.py), then one process."""
    launch, done = torchrun_launch
    assert done["returncode"] == 0, done["stderr"][-3000:]
    two = launch / "train"
    ranks = _ranks(two)
    assert [r["world"] for r in ranks] == [2, 2] and ranks[0]["mode"] == "ddp"
    assert ranks[0]["hash"] == ranks[1]["hash"]
    log = (two / "run" / "log.csv").read_text().splitlines()
    assert len(log) == 4 and (two / "run" / "model" / "config.json").exists()
    # one process on the same global batches (no accumulation) lands on the same weights
    one = _single_process(tmp_path / "single")
    assert one["world"] == 1
    assert abs(one["sum"] - ranks[0]["sum"]) / one["sum"] < 1e-5


@pytest.mark.skipif(os.environ.get("TLGEO_TEST_FSDP") != "1", reason="set TLGEO_TEST_FSDP=1 (another ~20 s)")
def test_fsdp_two_ranks_train_like_ddp(tmp_path):
    """FSDP2 (fully_shard per block, gloo on CPU) reaches the weights a single process reaches."""
    ranks = _torchrun(tmp_path, "fsdp")
    assert ranks[0]["mode"] == "fsdp" and ranks[0]["world"] == 2
    one = _single_process(tmp_path / "single")
    assert abs(one["sum"] - ranks[0]["sum"]) / one["sum"] < 1e-5
