"""Pretraining with parallel suppression (tlgeo.train): the training-time suppression is
the analysis edit, gradients flow through it, runs resume exactly, bad configs fail clearly."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tlgeo import Edit, load_model
from tlgeo.train import (
    ConfigError,
    EmptyDataError,
    ModelSpec,
    SuppressedLM,
    Suppression,
    TrainConfig,
    build_bridge,
    build_token_stream,
    hf_config,
    load_trained,
    lr_factor,
    train,
)

SPECS = {
    "gpt": ModelSpec(arch="gpt", d_model=32, n_layers=2, n_heads=4, context=32),
    "llama": ModelSpec(arch="llama", d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, context=32),
}
FIXED = {"value_full": "value_full", "attn": "attn", "value_excl_self": "value_excl_self"}


@pytest.fixture(scope="module")
def bridges():
    return {a: build_bridge(s, seed=0) for a, s in SPECS.items()}


@pytest.fixture
def toks():
    return torch.randint(0, 256, (2, 17), generator=torch.Generator().manual_seed(1))


def tiny_cfg(tmp_path, **kw) -> TrainConfig:
    base = dict(
        model=SPECS["llama"],
        data="mobydick",
        max_data_tokens=20_000,
        data_dir=str(tmp_path / "data"),
        seq_len=16,
        batch_size=4,
        steps=6,
        warmup=2,
        eval_every=3,
        eval_batches=2,
        out=str(tmp_path / "run"),
    )
    base.update(kw)
    return TrainConfig(**base)


def test_architectures_are_the_papers():
    g = hf_config(SPECS["gpt"])
    assert g.model_type == "starcoder2" and g.tie_word_embeddings and g.use_bias
    assert g.intermediate_size == 4 * 32 and "gelu" in g.hidden_act
    l = hf_config(SPECS["llama"])
    assert l.model_type == "llama" and l.num_key_value_heads == 2 and l.tie_word_embeddings


@pytest.mark.parametrize("arch", ["gpt", "llama"])
@pytest.mark.parametrize("variant", sorted(FIXED))
def test_training_forward_is_the_analysis_edit(bridges, toks, arch, variant):
    bridge = bridges[arch]
    lm = SuppressedLM(bridge, Suppression(variant, bridge.cfg))
    with torch.no_grad():
        trained = lm.logits(toks)
        analysis = bridge.run_with_hooks(toks, fwd_hooks=Edit(FIXED[variant], s_par=0.0, skip_first=0).hooks(bridge))
        plain = bridge(toks)
    assert torch.equal(trained, analysis)  # same code, bit for bit
    assert (trained - plain).abs().max() > 1e-4  # and it does change the forward


@pytest.mark.parametrize("arch", ["gpt", "llama"])
def test_gate_matches_fixed_edits_and_learns(bridges, toks, arch):
    bridge = bridges[arch]
    sup = Suppression("gate", bridge.cfg)
    lm = SuppressedLM(bridge, sup)
    with torch.no_grad():  # w = 0, b = 0: g = 0.5 everywhere, i.e. s_par = 0.5
        half = bridge.run_with_hooks(toks, fwd_hooks=Edit("value_full", s_par=0.5, skip_first=0).hooks(bridge))
        assert torch.allclose(lm.logits(toks), half, atol=1e-5)
        sup.gate_b.fill_(40.0)  # g -> 1: full removal
        full = bridge.run_with_hooks(toks, fwd_hooks=Edit("value_full", s_par=0.0, skip_first=0).hooks(bridge))
        assert torch.allclose(lm.logits(toks), full, atol=1e-5)
        sup.gate_b.zero_()
    loss = lm(toks)
    loss.backward()
    assert sup.gate_w.grad is not None and sup.gate_w.grad.abs().sum() > 0
    assert torch.isfinite(sup.gate_w.grad).all() and sup.gate_b.grad.abs().sum() > 0
    bridge.zero_grad(set_to_none=True)


@pytest.mark.parametrize("arch", ["gpt", "llama"])
def test_gradients_are_finite_and_flow_through_the_edit(bridges, toks, arch):
    bridge = bridges[arch]
    grads = {}
    for variant in ("none", "value_full"):
        lm = SuppressedLM(bridge, Suppression(variant, bridge.cfg))
        bridge.zero_grad(set_to_none=True)
        lm(toks).backward()
        params = dict(bridge.named_parameters())
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in params.values())
        grads[variant] = {n: p.grad.clone() for n, p in params.items()}
    bridge.zero_grad(set_to_none=True)
    v_name = next(n for n in grads["none"] if "v_proj" in n and n.endswith("weight"))
    assert not torch.allclose(grads["none"][v_name], grads["value_full"][v_name])


def test_lr_schedule_warmup_then_cosine(tmp_path):
    cfg = tiny_cfg(tmp_path, steps=100, warmup=10, min_lr_ratio=0.1)
    f = [lr_factor(s, cfg) for s in range(100)]
    assert f[0] == pytest.approx(0.1) and f[9] == pytest.approx(1.0)
    assert f[10] == pytest.approx(1.0) and all(a >= b for a, b in zip(f[10:], f[11:]))
    assert f[-1] == pytest.approx(0.1, abs=1e-3)


def test_resume_gives_the_identical_loss_trajectory(tmp_path):
    cfg_a = tiny_cfg(tmp_path, variant="gate", out=str(tmp_path / "a"))
    full = train(cfg_a, log=lambda *_: None)
    cfg_b = tiny_cfg(tmp_path, variant="gate", out=str(tmp_path / "b"))
    part = train(cfg_b, stop_after=3, log=lambda *_: None)
    assert len(part) == 3 and not (tmp_path / "b" / "model").exists()
    resumed = train(cfg_b, resume=True, log=lambda *_: None)
    assert resumed.step.tolist() == list(range(1, 7))
    for col in ("train_loss", "val_loss", "lr", "grad_norm"):
        assert resumed[col].fillna(-1).tolist() == full[col].fillna(-1).tolist(), col
    a, _ = load_trained(tmp_path / "a" / "model")
    b, sup = load_trained(tmp_path / "b" / "model")
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(p, q), n
    assert sup.variant == "gate" and sup.gate_b.abs().sum() > 0


def test_exported_model_boots_and_reproduces_training_forward(tmp_path, toks):
    cfg = tiny_cfg(tmp_path, model=SPECS["gpt"], variant="value_full", steps=2, warmup=1, eval_every=2)
    train(cfg, log=lambda *_: None)
    bridge = load_model(str(tmp_path / "run" / "model"))  # plain tlgeo.load_model
    ck = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)
    from tlgeo.train import make_model

    lm = make_model(cfg)
    lm.load_state_dict(ck["model"])
    with torch.no_grad():
        want = lm.logits(toks)
        got = bridge.run_with_hooks(toks, fwd_hooks=Edit("value_full", s_par=0.0, skip_first=0).hooks(bridge))
    assert torch.allclose(got, want, atol=1e-5)


def test_bad_configs_fail_clearly(tmp_path, bridges):
    with pytest.raises(ConfigError, match="unknown suppression variant 'v_para'"):
        tiny_cfg(tmp_path, variant="v_para").validate()
    with pytest.raises(ConfigError, match="unknown suppression variant"):
        Suppression("v_para", bridges["gpt"].cfg)
    with pytest.raises(ConfigError, match="n_heads=4 is not divisible by n_kv_heads=3"):
        hf_config(ModelSpec(arch="llama", d_model=32, n_heads=4, n_kv_heads=3))
    with pytest.raises(ConfigError, match="must be divisible by world size 1 x grad_accum 3"):
        train(tiny_cfg(tmp_path, batch_size=4, grad_accum=3), log=lambda *_: None)
    empty = tmp_path / "empty.txt"
    empty.write_text("   \n\n")
    with pytest.raises(ValueError, match="empty corpus"):
        build_token_stream(str(empty), tmp_path / "d")
    short = tmp_path / "short.txt"
    short.write_text("too short to train on")
    with pytest.raises(EmptyDataError, match="at least 1024"):
        build_token_stream(str(short), tmp_path / "d")
    with pytest.raises(EmptyDataError, match="no data sources"):
        build_token_stream(" , ", tmp_path / "d")


def test_tlgeo_train_command(tmp_path, capsys):
    from tlgeo.cli import main

    args = [
        "train",
        "--arch",
        "llama",
        "--d-model",
        "32",
        "--layers",
        "2",
        "--heads",
        "4",
        "--kv-heads",
        "2",
        "--context",
        "32",
        "--variant",
        "attn",
        "--data",
        "mobydick",
        "--max-data-tokens",
        "20000",
        "--data-dir",
        str(tmp_path / "data"),
        "--seq-len",
        "16",
        "--batch-size",
        "4",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--eval-every",
        "2",
        "--eval-batches",
        "1",
        "--out",
        str(tmp_path / "r"),
    ]
    assert main(args) == 0
    assert "final val loss" in capsys.readouterr().out
    assert json_variant(tmp_path / "r" / "model") == "attn"
    with pytest.raises(SystemExit):  # argparse rejects an unknown variant
        main(args + ["--variant", "nope"])


def json_variant(d):
    import json

    return json.loads((d / "suppression.json").read_text())["variant"]


def _small_bpe(tmp_path) -> str:
    """A real BPE tokenizer (400 tokens) trained on Moby Dick, saved as an HF directory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from tlgeo.data import load_text

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        [load_text("mobydick", max_chars=50_000)],
        trainers.BpeTrainer(
            vocab_size=400, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    d = tmp_path / "bpe"
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="</s>").save_pretrained(
        d
    )
    return str(d)


@pytest.mark.parametrize("arch", ["gpt", "llama"])
def test_training_with_a_bpe_tokenizer(tmp_path, arch):
    from tlgeo.train import TokenStream, load_tokenizer

    bpe = _small_bpe(tmp_path)
    tok = load_tokenizer(bpe)
    cfg = tiny_cfg(tmp_path, model=SPECS[arch], tokenizer=bpe, steps=2, warmup=1, eval_every=2)
    log = train(cfg, log=lambda *_: None)
    assert log["val_loss"].notna().any()
    bridge = load_model(str(tmp_path / "run" / "model"))
    assert bridge.cfg.d_vocab == len(tok) == 400  # the vocabulary follows the tokenizer, not ModelSpec's 258
    text = "Call me Ishmael."
    plain = dict(add_special_tokens=False)
    assert bridge.tokenizer(text, **plain)["input_ids"] == tok(text, **plain)["input_ids"]  # exported with the run
    # read as it was trained: BOS first, though TransformerLens boots a Starcoder2 (the gpt) without it
    assert bridge.to_tokens(text)[0].tolist() == [tok.bos_token_id, *tok(text, **plain)["input_ids"]]
    assert TrainConfig.load(tmp_path / "run" / "config.json").model.vocab_size == 400
    (data,) = [p for p in (tmp_path / "data").iterdir() if p.is_dir()]
    stream = TokenStream(data, 16, bos=tok.bos_token_id)
    assert (stream.batch(0, 4)[:, 0] == tok.bos_token_id).all()  # every window starts as to_tokens does
    assert (TokenStream(data, 16).batch(0, 4)[:, 0] != tok.bos_token_id).any()
    assert int(stream.batch(0, 4).max()) < 400


@pytest.mark.parametrize("arch", ["gpt", "llama"])
def test_a_byte_model_reads_text_without_bos_as_it_was_trained(tmp_path, arch):
    """Byte-level windows start anywhere in the text, never with BOS: the exported model reads so."""
    train(tiny_cfg(tmp_path, model=SPECS[arch], steps=1, warmup=0, eval_every=1), log=lambda *_: None)
    bridge = load_model(str(tmp_path / "run" / "model"))
    tokens = bridge.to_tokens("Call me")[0].tolist()
    assert len(tokens) == 7 and bridge.tokenizer.bos_token_id not in tokens  # seven bytes, no BOS


@pytest.mark.parametrize("vocab, bos", [(258, False), (400, True)])
def test_a_folder_exported_before_bos_was_recorded_reads_as_its_tokenizer_was_trained(tmp_path, vocab, bos):
    """No ``prepend_bos`` in ``suppression.json``: training put BOS first with every tokenizer but the bytes."""
    import json
    from types import SimpleNamespace

    from tlgeo.models.loading import read_as_trained

    (tmp_path / "suppression.json").write_text(json.dumps({"variant": "none", "site": None, "skip_first": 0}))
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": vocab}))
    bridge = SimpleNamespace(cfg=SimpleNamespace(default_prepend_bos=not bos))
    assert read_as_trained(bridge, tmp_path).cfg.default_prepend_bos is bos
    (tmp_path / "suppression.json").unlink()  # not a tlgeo training: the architecture's default stays
    bridge.cfg.default_prepend_bos = not bos
    assert read_as_trained(bridge, tmp_path).cfg.default_prepend_bos is (not bos)


def test_unknown_tokenizer_fails_clearly(tmp_path):
    from tlgeo.train import load_tokenizer

    with pytest.raises(ValueError, match="no tokenizer files"):
        load_tokenizer(str(tmp_path))


def test_the_default_warmup_fits_a_short_run():
    import argparse

    from tlgeo.train.cli import add_train_args, train_config

    parse = lambda *a: train_config(add_train_args(argparse.ArgumentParser()).parse_args(list(a)))  # noqa: E731
    assert parse("--steps", "3").warmup == 0  # was 20 > 3 steps: a ConfigError
    assert parse("--steps", "100").warmup == 10 and parse("--steps", "1000").warmup == 20
    assert parse("--steps", "3", "--warmup", "2").warmup == 2  # given: kept
    parse("--steps", "3").validate()
    with pytest.raises(Exception, match="warmup=5 must be between 0 and steps=3"):
        parse("--steps", "3", "--warmup", "5").validate()


def test_the_flags_are_the_configs_fields_and_a_bad_one_is_one_line(capsys):
    """tlgeo train's flags come from ModelSpec and TrainConfig: no flags give the default config, a
    config's own flags (train_argv) give it back, and a bad value is one line naming it."""
    import argparse

    from tlgeo.cli import main
    from tlgeo.train.cli import add_train_args, train_argv, train_config

    parse = lambda *a: train_config(add_train_args(argparse.ArgumentParser()).parse_args(list(a)))  # noqa: E731
    assert parse() == TrainConfig()
    spec = ModelSpec(arch="llama", d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, rope_theta=500.0)
    cfg = TrainConfig(model=spec, variant="attn", steps=30, lr=3e-4, max_data_tokens=1000, tensorboard=True)
    assert parse(*train_argv(cfg)) == cfg and train_argv(TrainConfig()) == []
    assert main(["train", "--heads", "3", "--steps", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["tlgeo train: error: d_model=128 is not divisible by n_heads=3"]


class _Payload:
    """A pickle that would run code when loaded with ``weights_only=False``."""

    def __reduce__(self):
        import os

        return (os.system, ("touch PWNED-by-checkpoint",))


def test_a_checkpoint_from_elsewhere_runs_no_code(tmp_path, monkeypatch):
    """Resuming reads the checkpoint with ``weights_only=True``: one that holds more than tensors and plain values
    (here a pickle that would run a shell command) is refused in one line and runs nothing."""
    from tlgeo.train.config import ConfigError

    monkeypatch.chdir(tmp_path)
    cfg = tiny_cfg(tmp_path, out=str(tmp_path / "run"))
    train(cfg, stop_after=1, log=lambda *_: None)  # a real checkpoint: it loads (the resume test compares numbers)
    torch.save({"model": _Payload()}, tmp_path / "run" / "checkpoint.pt")
    with pytest.raises(ConfigError, match="is not a checkpoint of this tlgeo") as e:
        train(cfg, resume=True, log=lambda *_: None)
    assert "\n" not in str(e.value) and not (tmp_path / "PWNED-by-checkpoint").exists()


def test_a_checkpoint_of_another_run_is_not_resumed(tmp_path):
    """A run whose settings changed under the same folder (another learning rate or number of steps) would continue
    another trajectory: it is refused, naming what differs; where it writes and how it logs may change."""
    from tlgeo.train.config import ConfigError

    cfg = tiny_cfg(tmp_path, out=str(tmp_path / "run"))
    train(cfg, stop_after=2, log=lambda *_: None)
    with pytest.raises(ConfigError, match=r"steps: 6 -> 12; lr: 0\.001 -> 0\.002"):
        train(dataclasses.replace(cfg, lr=2e-3, steps=12), resume=True, log=lambda *_: None)
    done = train(dataclasses.replace(cfg, eval_every=3, threads=1), resume=True, log=lambda *_: None)
    assert done.step.tolist() == list(range(1, cfg.steps + 1))


def test_a_damaged_token_stream_is_built_again(tmp_path, capsys):
    """The token stream is sealed when built: a changed byte is found at the next use and the stream rebuilt."""
    text = tmp_path / "t.txt"
    text.write_text("Some words to tokenise, again and again. " * 200)
    d = build_token_stream(str(text), tmp_path / "d")
    good = (d / "train.bin").read_bytes()
    data = bytearray(good)
    data[10] ^= 0xFF
    (d / "train.bin").write_bytes(bytes(data))
    assert build_token_stream(str(text), tmp_path / "d") == d
    assert (
        "is damaged (train.bin: its content changed since it was sealed): building it again" in capsys.readouterr().err
    )
    assert (d / "train.bin").read_bytes() == good
