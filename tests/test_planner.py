"""The planner (tlgeo.planner, tlgeo plan): shapes from configs, FLOPs and memory, per analysis."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tlgeo.cli import main
from tlgeo.planner import DEVICES, SEED_MODELS, ModelShape, Work, estimate, model_shape

# total parameters as each model card states them (billions)
PUBLISHED = {"Qwen/Qwen3-0.6B": 0.6, "Qwen/Qwen3-1.7B": 1.7, "Qwen/Qwen3-4B": 4.0, "Qwen/Qwen3-8B": 8.2,
             "Qwen/Qwen3-30B-A3B": 30.5, "meta-llama/Llama-3.2-3B": 3.21, "TinyLlama/TinyLlama-1.1B": 1.1,
             "google/gemma-2-9b": 9.24, "EleutherAI/pythia-410m": 0.405, "EleutherAI/pythia-1.4b": 1.41,
             "facebook/opt-1.3b": 1.3, "distilgpt2": 0.082,
             "google/gemma-3-1b-pt": 1.0, "openai/gpt-oss-20b": 20.9}  # these two from their config.json alone


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_seed_shapes_have_their_published_size(name):
    assert model_shape(name).params / 1e9 == pytest.approx(PUBLISHED[name], rel=0.02)


def test_a_seed_model_without_attention_is_refused_by_name():
    with pytest.raises(ValueError, match="mamba has neither"):
        model_shape("state-spaces/mamba-130m-hf")


@pytest.mark.parametrize("kind", ["llama", "neox", "gpt2"])
def test_a_shape_counts_the_model_s_own_matrices(kind, tmp_path):
    from transformers import AutoModelForCausalLM

    from tlgeo.models import save_tiny_model, tiny_config

    hf = AutoModelForCausalLM.from_config(tiny_config(kind))
    seen, matrices = set(), 0
    for p in hf.parameters():  # tied weights once; norms and biases (vectors) are left out
        if p.ndim == 2 and id(p) not in seen and "position" not in str(p.shape):
            seen.add(id(p))
            matrices += p.numel()
    positions = sum(m.weight.numel() for n, m in hf.named_modules() if n.endswith(("wpe", "embed_positions")))
    assert model_shape(f"tiny:{kind}").params == matrices - positions
    save_tiny_model(tmp_path / kind, kind)  # a local directory and its config.json: the same shape
    folder, file = model_shape(str(tmp_path / kind)), model_shape(str(tmp_path / kind / "config.json"))
    assert dataclasses.replace(folder, name="") == dataclasses.replace(file, name="")
    assert model_shape(str(tmp_path / kind)).params == matrices - positions


def test_moe_counts_all_experts_in_memory_and_the_routed_ones_in_flops():
    moe = model_shape("Qwen/Qwen3-30B-A3B")
    dense_flops = ModelShape(**{**SEED_MODELS["Qwen/Qwen3-30B-A3B"], "name": "x", "n_experts": 0,
                                "experts_per_token": 0}).forward_flops(1, 1)
    assert moe.forward_flops(1, 1) > dense_flops  # 8 routed experts of 768 against one MLP of 768
    assert moe.forward_flops(1000, 1) == pytest.approx(1000 * moe.forward_flops(1, 1))
    assert moe.params > 10 * (moe.forward_flops(1, 1) / 2)  # 128 experts held, 8 used per token


def test_estimate_adds_up_and_says_what_does_not_fit():
    shape = model_shape("Qwen/Qwen3-8B")
    df = estimate(shape, [Work("a", 4096, 1024, 4), Work("b", 8192, 1024, 4, overhead=2.0, kept_bytes=2**34)],
                  "h100", "bfloat16")
    a, b, total = (df.iloc[i] for i in range(3))
    assert a["weights_gib"] == pytest.approx(shape.params * 2 / 2**30)
    assert b["seconds"] == pytest.approx(4 * a["seconds"])  # twice the tokens, twice the overhead
    assert b["kept_gib"] == 16 and total["peak_gib"] == b["peak_gib"] and total["fits"] == (b["peak_gib"] <= 80)
    big = estimate(model_shape("Qwen/Qwen3-30B-A3B"), [Work("x", 1, 1)], "h100", "float32")
    assert not big["fits"].iloc[0]  # 30.5 B float32 weights: 114 GiB
    with pytest.raises(ValueError, match="unknown dtype 'int4'"):
        estimate(shape, [], "cpu", "int4")


def test_plan_command_plans_a_run_without_weights(capsys, monkeypatch):
    import tlgeo.models

    monkeypatch.setattr(tlgeo.models, "load_model", lambda *a, **k: pytest.fail("the planner loaded a model"))
    assert main(["plan", "--model", "Qwen/Qwen3-8B", "--device", "h200", "run", "--tokens", "8192",
                 "--sites", "attn,mlp"]) == 0
    out = capsys.readouterr().out
    assert "8.19 B parameters" in out and "bfloat16 weights" in out
    lines = {line.split()[0]: line for line in out.splitlines()[1:] if line.strip()}
    assert {"start", "profile", "baseline", "edits", "total"} <= set(lines)
    assert "4 perplexity pass(es)" in lines["edits"]  # attn and mlp, each parallel and perpendicular
    assert main(["plan", "--model", "tiny:llama", "ppl", "--site", "attn", "--tokens", "-3"]) == 2
    assert "tokens" in capsys.readouterr().err


def test_unknown_model_names_the_accepted_kinds(capsys):
    assert main(["plan", "--model", "nobody/none", "run"]) == 2
    err = capsys.readouterr().err
    assert "no shape for 'nobody/none'" in err and "Qwen/Qwen3-8B" in err


def test_devices_are_named():
    assert {"cpu", "h100", "h200"} <= set(DEVICES) and not DEVICES["cpu"].gpu
    json.dumps({k: vars(v) for k, v in DEVICES.items()})  # plain values
