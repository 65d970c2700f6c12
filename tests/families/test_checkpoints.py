"""The seed papers' real models as fixtures: their published configs, reduced to test size, boot in
the bridge as their family, match Hugging Face's logits, and take every supported site's edits."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from tlgeo.families import FAMILIES, SITE_COLUMNS, UnsupportedError, family_of, family_of_config, support
from tlgeo.families.checkpoints import REDUCED, SEED_CHECKPOINTS, SEED_FAMILIES, reduced_config

IDS = list(SEED_CHECKPOINTS)
PRISTINE = copy.deepcopy(SEED_CHECKPOINTS)  # at collection, before any test has reduced a config

# hub id -> the bridge's exact error, for a real config value the bridge cannot run (none at present)
BRIDGE_FAILS: dict[str, str] = {}


def _params(ids=IDS):
    return [
        pytest.param(
            i, id=i, marks=[pytest.mark.xfail(strict=True, reason=BRIDGE_FAILS[i])] if i in BRIDGE_FAILS else []
        )
        for i in ids
    ]


def _get(real: dict, *keys, default=KeyError):
    for k in keys:
        if real.get(k) is not None:
            return real[k]
    if default is KeyError:
        raise KeyError(keys)
    return default


# --------------------------------------------------------------------------------------------
# The tables
# --------------------------------------------------------------------------------------------


def test_every_seed_model_has_a_family_and_every_family_its_seed_models():
    assert set(SEED_FAMILIES) == set(SEED_CHECKPOINTS)
    for hub_id, name in SEED_FAMILIES.items():
        assert name in FAMILIES, hub_id
        assert family_of_config(SEED_CHECKPOINTS[hub_id]).name == name, hub_id  # the real config.json
        assert family_of_config(reduced_config(hub_id)).name == name, hub_id
    for name, fam in FAMILIES.items():
        for hub_id in fam.seed_models:
            assert hub_id in SEED_CHECKPOINTS, (name, hub_id)
            assert SEED_FAMILIES[hub_id] == name, hub_id
    # and every seed model is some family's
    assert {m for f in FAMILIES.values() for m in f.seed_models} == set(SEED_CHECKPOINTS)


def test_the_planners_seed_shapes_read_the_configs():
    """The planner's shape of each seed model (with attention) is its config.json's, read here independently."""
    from tlgeo.planner import model_shape

    planned = [i for i, f in SEED_FAMILIES.items() if FAMILIES[f].attention]
    assert len(planned) >= 15, planned
    for hub_id in planned:
        real, shape = SEED_CHECKPOINTS[hub_id], vars(model_shape(hub_id))
        d_model = _get(real, "hidden_size", "n_embd")
        n_heads = _get(real, "num_attention_heads", "n_head")
        moe = "num_experts" in real or "num_local_experts" in real
        got = dict(
            family=FAMILIES[SEED_FAMILIES[hub_id]].model_type,  # the planner names the HF model_type
            n_layers=_get(real, "num_hidden_layers", "n_layer"),
            d_model=d_model,
            n_heads=n_heads,
            n_kv_heads=_get(real, "num_key_value_heads", default=n_heads),
            d_head=_get(real, "head_dim", default=d_model // n_heads),
            d_mlp=(
                _get(real, "moe_intermediate_size", "intermediate_size")
                if moe
                else _get(real, "intermediate_size", "ffn_dim", "n_inner", default=4 * d_model)
            ),
            vocab=real["vocab_size"],
            n_ctx=_get(real, "max_position_embeddings", "n_positions"),
            tied=_full_config(hub_id).tie_word_embeddings,
        )
        want = {k: shape[k] for k in got}
        assert got == want, hub_id
        if moe:
            assert _get(real, "num_experts", "num_local_experts") == shape["n_experts"], hub_id
            assert real["num_experts_per_tok"] == shape["experts_per_token"], hub_id


def _full_config(hub_id):
    """The real, full-size config object (no weights)."""
    import transformers

    real = copy.deepcopy(SEED_CHECKPOINTS[hub_id])
    real.pop("quantization_config", None)
    return transformers.AutoConfig.for_model(real.pop("model_type"), **real)


def test_real_configs_are_consistent():
    for hub_id, real in SEED_CHECKPOINTS.items():
        assert real["architectures"] and real["architectures"][0].endswith(("ForCausalLM", "LMHeadModel")), hub_id
        heads, kv = real.get("num_attention_heads"), real.get("num_key_value_heads")
        if heads and kv:
            assert heads % kv == 0, hub_id
        if "layer_types" in real:
            assert len(real["layer_types"]) == real["num_hidden_layers"], hub_id
        if "head_dim" not in real and heads:
            assert real["hidden_size"] % heads == 0, hub_id


# --------------------------------------------------------------------------------------------
# The reduction
# --------------------------------------------------------------------------------------------

SIZES = {  # keys reduced_config changes by design; every other real key must survive
    "hidden_size",
    "n_embd",
    "num_hidden_layers",
    "n_layer",
    "num_attention_heads",
    "n_head",
    "num_key_value_heads",
    "head_dim",
    "query_pre_attn_scalar",
    "intermediate_size",
    "ffn_dim",
    "n_inner",
    "moe_intermediate_size",
    "num_experts",
    "num_local_experts",
    "num_experts_per_tok",
    "experts_per_token",
    "word_embed_proj_dim",
    "max_position_embeddings",
    "n_positions",
    "n_ctx",
    "sliding_window",
    "sliding_window_size",
    "max_window_layers",
    "layer_types",
    "sliding_window_pattern",
    "time_step_rank",
    "vocab_size",
    "quantization_config",
    # rotary settings: transformers moves them into rope_parameters (checked there)
    "rope_theta",
    "rope_scaling",
    "rope_local_base_freq",
    "rotary_pct",
    "rotary_emb_base",
}


@pytest.mark.parametrize("hub_id", IDS)
def test_reduced_config_keeps_the_real_values(hub_id):
    cfg = reduced_config(hub_id)
    real = SEED_CHECKPOINTS[hub_id]
    assert real == PRISTINE[hub_id], "reduced_config changed the real values (transformers edits rope dicts in place)"
    assert cfg.model_type == real["model_type"] and cfg.architectures == real["architectures"]
    for k, v in real.items():
        if k not in SIZES:
            assert getattr(cfg, k) == v, (hub_id, k)
    assert not hasattr(cfg, "quantization_config") or cfg.quantization_config is None
    # rotary: the real base(s) and scaling, as transformers reads them
    rope = getattr(cfg, "rope_parameters", None)
    if real["model_type"] == "gemma3_text":
        assert rope["full_attention"]["rope_theta"] == real["rope_theta"]
        assert rope["sliding_attention"]["rope_theta"] == real["rope_local_base_freq"]
    elif "rope_theta" in real or "rotary_emb_base" in real:
        assert rope["rope_theta"] == _get(real, "rope_theta", "rotary_emb_base")
        assert rope.get("partial_rotary_factor", 1.0) == real.get("rotary_pct", 1.0)
        for k, v in (real.get("rope_scaling") or {}).items():
            assert rope[k] == v, (hub_id, k)
        if not real.get("rope_scaling"):
            assert rope["rope_type"] == "default"


@pytest.mark.parametrize("hub_id", IDS)
def test_reduced_config_sizes(hub_id):
    import transformers

    real, cfg = SEED_CHECKPOINTS[hub_id], reduced_config(hub_id)
    d = cfg.to_dict()
    assert cfg.num_hidden_layers == 2 and reduced_config(hub_id, n_layers=3).num_hidden_layers == 3
    assert (cfg.vocab_size, cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id) == (258, 256, 257, 257)
    assert _get(d, "hidden_size", "n_embd") == REDUCED["hidden"]
    for k in ("max_position_embeddings", "n_positions", "n_ctx"):
        if k in real:
            assert d[k] <= 256, k
    for k in ("sliding_window", "sliding_window_size"):
        if real.get(k) is not None:
            assert d[k] == 8, k
    if "word_embed_proj_dim" in real:  # OPT: the real ratio to hidden_size (opt-350m: 512 / 1024 -> 32 / 64)
        assert d["word_embed_proj_dim"] / 64 == real["word_embed_proj_dim"] / real["hidden_size"]
    heads = real.get("num_attention_heads")
    if heads and "num_key_value_heads" in real:
        kv_real, kv = real["num_key_value_heads"], cfg.num_key_value_heads
        assert cfg.num_attention_heads == 4 and 4 % kv == 0
        assert (kv == 4) == (kv_real == heads)  # MHA stays MHA, GQA stays grouped
        if kv_real == 1:
            assert kv == 1  # MQA stays MQA
    if real["model_type"] == "mamba":
        assert cfg.intermediate_size == cfg.expand * cfg.hidden_size == 128
        assert cfg.time_step_rank == math.ceil(cfg.hidden_size / 16)  # the real model's rank: hidden / 16
        assert (cfg.state_size, cfg.conv_kernel) == (real["state_size"], real["conv_kernel"])
    torch.manual_seed(0)
    n = sum(p.numel() for p in transformers.AutoModelForCausalLM.from_config(cfg).parameters())
    assert n < 1_000_000, n


def test_reduced_kv_heads_keep_the_ratio():
    kv = {i: reduced_config(i).num_key_value_heads for i in IDS if "num_key_value_heads" in SEED_CHECKPOINTS[i]}
    assert kv["Qwen/Qwen3-0.6B"] == 2 and kv["google/gemma-2-9b"] == 2  # 2 query heads per KV head
    assert kv["Qwen/Qwen3-4B"] == kv["TinyLlama/TinyLlama-1.1B"] == kv["google/gemma-3-1b-pt"] == 1
    assert reduced_config("facebook/opt-350m").word_embed_proj_dim == 32
    assert reduced_config("facebook/opt-1.3b").word_embed_proj_dim == 64


@pytest.mark.parametrize("hub_id", [i for i, f in SEED_FAMILIES.items() if FAMILIES[f].sliding])
@pytest.mark.parametrize("n_layers", [1, 2, 3, 7])
def test_sliding_pattern_keeps_both_kinds(hub_id, n_layers):
    real_types = _full_config(hub_id).layer_types
    assert set(real_types) == {"sliding_attention", "full_attention"}
    cfg = reduced_config(hub_id, n_layers=n_layers)
    assert len(cfg.layer_types) == n_layers
    assert cfg.layer_types[0] == real_types[0]
    if n_layers >= 2:
        assert set(cfg.layer_types) == set(real_types)
    assert cfg.sliding_window == 8


def test_gemma3_pattern():
    assert reduced_config("google/gemma-3-1b-pt", n_layers=7).layer_types == ["sliding_attention"] * 5 + [
        "full_attention",
        "sliding_attention",
    ]
    assert reduced_config("google/gemma-3-1b-pt").layer_types == ["sliding_attention", "full_attention"]


def test_moe_reduction():
    q = reduced_config("Qwen/Qwen3-30B-A3B")
    assert (q.num_experts, q.num_experts_per_tok, q.norm_topk_prob) == (4, 2, True)
    assert q.moe_intermediate_size == 24  # 768 / 2048 of the hidden size
    g = reduced_config("openai/gpt-oss-20b")
    assert (g.num_local_experts, g.num_experts_per_tok, g.experts_per_token) == (4, 2, 2)


def test_unknown_id():
    with pytest.raises(KeyError, match="Qwen/Qwen3-0.6B") as e:
        reduced_config("Qwen/Qwen3-0.5B")
    assert "known" in str(e.value) and "distilgpt2" in str(e.value)


# --------------------------------------------------------------------------------------------
# The reduced models, booted in the bridge
# --------------------------------------------------------------------------------------------


def _random_model(cfg):
    """The reduced config's random HF model, the reference the bridge is checked against.

    Eager attention: transformers' default (sdpa) silently drops Gemma 2's ``attn_logit_softcapping``,
    so it is not the real architecture. Weights re-drawn wider than transformers' init (std 0.02),
    with which attention is nearly uniform and logits nearly flat: there a lost soft-cap or rope
    scaling moved the logits by less than the 1e-4 the check allows (see
    :func:`test_real_features_reach_the_logits`)."""
    import transformers

    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in hf.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
            else:  # norms' gains, biases, sinks, Mamba's D
                p.add_(torch.randn(p.shape, generator=g) * 0.1)
    return hf


def _tokens():
    return torch.randint(0, 256, (2, 10), generator=torch.Generator().manual_seed(1))


# a real value of each kind and a config without it: with the fixtures' weights it must move the logits
FEATURES = {
    "google/gemma-2-9b": ("attn_logit_softcapping", dict(attn_logit_softcapping=None)),
    "meta-llama/Llama-3.2-3B": (
        "llama3 rope scaling",
        dict(rope_parameters={"rope_type": "default", "rope_theta": 500000.0}),
    ),
    "openai/gpt-oss-20b": ("yarn rope scaling", dict(rope_parameters={"rope_type": "default", "rope_theta": 150000})),
    "google/gemma-3-1b-pt": ("sliding layer of window 8", dict(layer_types=["full_attention"] * 2)),
    "EleutherAI/pythia-410m": (
        "rotary_pct 0.25",
        dict(rope_parameters={"rope_type": "default", "rope_theta": 10000, "partial_rotary_factor": 1.0}),
    ),
}


@pytest.mark.parametrize("hub_id", list(FEATURES))
def test_real_features_reach_the_logits(hub_id):
    """The logits check below can fail: dropping one real feature moves the reference logits by far
    more than its tolerance."""
    what, without = FEATURES[hub_id]
    cfg, other = reduced_config(hub_id), reduced_config(hub_id)
    for k, v in without.items():
        setattr(other, k, v)
    hf, hf_without = _random_model(cfg), _random_model(other)
    assert {k: v.shape for k, v in hf.state_dict().items()} == {k: v.shape for k, v in hf_without.state_dict().items()}
    with torch.no_grad():
        gap = (hf(_tokens()).logits - hf_without(_tokens()).logits).abs().max().item()
    assert gap > 1e-2, (what, gap)


@pytest.fixture(scope="module", params=_params())
def booted(request, tmp_path_factory):
    """``(hub_id, hf, bridge, tokens)``: the reduced random model, saved and booted once per id."""
    from transformers.utils import logging as hf_logging

    from tlgeo.models import byte_tokenizer, load_model, save_local

    hub_id = request.param
    hf = _random_model(reduced_config(hub_id))
    path = tmp_path_factory.mktemp(hub_id.replace("/", "--"))
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        save_local(hf, path)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    byte_tokenizer().save_pretrained(path)
    bridge = load_model(str(path))
    return hub_id, hf, bridge, _tokens()


def test_boots_as_its_family(booted):
    hub_id, _, bridge, _ = booted
    assert family_of(bridge).name == SEED_FAMILIES[hub_id]


def test_bridge_logits_match_hf(booted):
    _, hf, bridge, tokens = booted
    with torch.no_grad():
        want = hf(tokens).logits
        got = bridge(tokens)
    assert got.shape == (2, 10, 258)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)


@pytest.mark.parametrize("site", SITE_COLUMNS)
def test_edits(booted, site):
    from tlgeo.hooks.edits import Edit

    hub_id, _, bridge, tokens = booted
    family = SEED_FAMILIES[hub_id]
    if not support(family, site).ok:
        with pytest.raises(UnsupportedError):
            Edit(site).hooks(bridge)
        return
    with torch.no_grad():
        plain = bridge(tokens)
        noop = bridge.run_with_hooks(tokens, fwd_hooks=Edit(site).hooks(bridge))
        removed = bridge.run_with_hooks(tokens, fwd_hooks=Edit(site, s_par=0.0).hooks(bridge))
    assert torch.equal(noop, plain)
    assert torch.isfinite(removed).all()
    assert not torch.equal(removed, plain)  # the edit reached the forward
