"""torchrun with 2 CPU processes (gloo): DDP training of a tiny model; both ranks must
end with the same weights, equal to what a single process computes on the same batches."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = r'''
import hashlib, json, sys, warnings
warnings.filterwarnings("ignore")
import torch
torch.set_num_threads(1)
from tlgeo.train import ModelSpec, TrainConfig, train

out, mode = sys.argv[1], sys.argv[2]
cfg = TrainConfig(model=ModelSpec(arch="llama", d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, context=32),
                  variant="value_full", data="mobydick", max_data_tokens=20000, data_dir=out + "/data",
                  seq_len=16, batch_size=4, grad_accum=2 if mode == "ddp" else 1, steps=3, warmup=1,
                  eval_every=3, eval_batches=2, dist=mode, out=out + "/run")

def on_end(model, info):
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, StateDictOptions
    sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    h = hashlib.sha256()
    for k in sorted(sd):
        h.update(k.encode()); h.update(sd[k].detach().float().cpu().numpy().tobytes())
    with open(f"{out}/rank{info.rank}.json", "w") as f:
        json.dump({"hash": h.hexdigest(), "world": info.world, "mode": info.mode,
                   "sum": float(sum(v.detach().float().abs().sum() for v in sd.values()))}, f)

train(cfg, log=lambda *a: None, on_end=on_end)
'''


def _torchrun(tmp_path: Path, mode: str) -> list[dict]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(script), str(tmp_path), mode]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env,
                       cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 0, r.stderr[-4000:]
    return [json.loads((tmp_path / f"rank{i}.json").read_text()) for i in range(2)]


def _single_process(out: Path, monkeypatch) -> dict:
    """The worker run in this process (torch and tlgeo are imported already) with one thread."""
    import torch

    out.mkdir()
    threads = torch.get_num_threads()
    monkeypatch.setattr(sys, "argv", ["worker.py", str(out), "none"])
    try:
        exec(compile(WORKER, "worker.py", "exec"), {"__name__": "__main__"})
    finally:
        torch.set_num_threads(threads)
    return json.loads((out / "rank0.json").read_text())


def test_ddp_two_ranks_agree_and_match_single_process(tmp_path, monkeypatch):
    ranks = _torchrun(tmp_path, "ddp")
    assert [r["world"] for r in ranks] == [2, 2] and ranks[0]["mode"] == "ddp"
    assert ranks[0]["hash"] == ranks[1]["hash"]
    log = (tmp_path / "run" / "log.csv").read_text().splitlines()
    assert len(log) == 4 and (tmp_path / "run" / "model" / "config.json").exists()
    # one process on the same global batches (no accumulation) lands on the same weights
    one = _single_process(tmp_path / "single", monkeypatch)
    assert one["world"] == 1
    assert abs(one["sum"] - ranks[0]["sum"]) / one["sum"] < 1e-5


@pytest.mark.skipif(os.environ.get("TLGEO_TEST_FSDP") != "1", reason="set TLGEO_TEST_FSDP=1 (another ~20 s)")
def test_fsdp_two_ranks_train_like_ddp(tmp_path, monkeypatch):
    """FSDP2 (fully_shard per block, gloo on CPU) reaches the weights a single process reaches."""
    ranks = _torchrun(tmp_path, "fsdp")
    assert ranks[0]["mode"] == "fsdp" and ranks[0]["world"] == 2
    one = _single_process(tmp_path / "single", monkeypatch)
    assert abs(one["sum"] - ranks[0]["sum"]) / one["sum"] < 1e-5
