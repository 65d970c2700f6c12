"""A model sharded by accelerate (here: blocks offloaded to CPU memory and to disk, the hooks on
dispatched modules) gives every analysis the numbers of the same model unsharded."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from tlgeo.models import input_device, load_model
from tlgeo.report.registry import load_analyses

from ..test_contract import _comparable

ANALYSES = load_analyses()
# tiny:llama's three blocks: the first in memory, the other two on disk, as a model larger than its GPUs
DEVICE_MAP = {
    "model.embed_tokens": "cpu",
    "model.rotary_emb": "cpu",
    "model.layers.0": "cpu",
    "model.layers.1": "disk",
    "model.layers.2": "disk",
    "model.norm": "cpu",
    "lm_head": "cpu",
}


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    return load_model("tiny:llama", device_map=DEVICE_MAP, offload_folder=tmp_path_factory.mktemp("offload"))


@pytest.fixture(scope="module")
def whole_model():
    return load_model("tiny:llama")  # the same weights, loaded by the same name (result rows name the model)


def test_offloaded_blocks_and_hooks_fire(sharded, llama):
    meta = [n for n, p in sharded.named_parameters() if p.device.type == "meta"]
    assert meta and all(".layers.1." in n or ".layers.2." in n for n in meta)  # on disk until they run
    assert input_device(sharded) == torch.device("cpu")
    toks = torch.tensor([[256, 72, 101, 108, 108, 111, 32, 119]])
    fired = []
    logits = sharded.run_with_hooks(toks, fwd_hooks=[("blocks.2.hook_resid_pre", lambda x, hook: fired.append(1))])
    assert fired == [1]
    torch.testing.assert_close(logits, llama(toks), rtol=0, atol=0)


@pytest.mark.parametrize("name", list(ANALYSES))
def test_every_analysis_gives_the_unsharded_numbers(name, sharded, whole_model):
    a = ANALYSES[name]
    cfg = a.config(**a.tiny)
    whole, split = a.run(whole_model, cfg).tables(), a.run(sharded, cfg).tables()
    assert set(whole) == set(split) and whole
    for t in whole:
        table = a.result.table(t)
        pd.testing.assert_frame_equal(
            _comparable(split[t], table),
            _comparable(whole[t], table),
            check_exact=False,
            rtol=1e-6,
            atol=1e-8,
            obj=f"{name}.{t}",
        )


def test_bad_device_names_the_problem():
    from tlgeo.models import resolve_device, resolve_dtype

    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available here"):
            resolve_device("cuda")
    with pytest.raises(ValueError, match="unknown device 'gpu0'"):
        resolve_device("gpu0")
    with pytest.raises(ValueError, match="unknown dtype 'fp8'"):
        resolve_dtype("fp8")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_dtype("bfloat16") is torch.bfloat16


def test_token_ids_go_to_the_input_device_not_cfg_device():
    """No module sends token ids to ``model.cfg.device`` (one device the bridge picked, which has no
    single meaning for a model spread over several): they go to :func:`tlgeo.models.input_device`."""
    import re
    from pathlib import Path

    import tlgeo

    root = Path(tlgeo.__file__).parent
    pattern = re.compile(r"model\.cfg\.device\b|getattr\([\w.]*model\.cfg,\s*[\"']device[\"']")
    found = [
        f"{p.relative_to(root)}:{i}"
        for p in sorted(root.rglob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == [], found


def test_the_overhead_benchmark_script_runs(capsys, tmp_path):
    """scripts/bench_sharded.py at tiny scale: a line per analysis with both times and their ratio, and the same
    numbers in its table, each row with the commit that measured it."""
    import re

    from tlgeo.runner.provenance import read

    from ..scripts import load_script

    load_script("bench_sharded").main(
        ["--rounds", "1", "--skip-smollm2", "--analyses", "ppl,profile", "--out", str(tmp_path)]
    )
    found = re.findall(r"(\w+) \| whole +([\d.]+) s +sharded +([\d.]+) s +([\d.]+)x", capsys.readouterr().out)
    assert sorted(name for name, *_ in found) == ["ppl", "profile"], found
    for _, whole, sharded, ratio in found:  # seconds to 3 decimals, the ratio to 2
        assert float(whole) > 0 and float(sharded) > 0
        assert float(ratio) == pytest.approx(float(sharded) / float(whole), rel=0.1, abs=0.01)
    table = pd.read_csv(tmp_path / "sharded.csv").set_index("analysis")
    for name, whole, sharded, _ in found:
        assert table.loc[name, "whole_s"] == pytest.approx(float(whole), abs=6e-4)
        assert table.loc[name, "sharded_s"] == pytest.approx(float(sharded), abs=6e-4)
    (line,) = read(tmp_path)
    assert set(table["commit"]) == {line["git"]["commit"]} and line["argv"][0] == "scripts/bench_sharded.py"
