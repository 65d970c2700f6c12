import sys
from pathlib import Path

import pytest
import torch

lm_eval = pytest.importorskip("lm_eval")

from lm_eval.api.instance import Instance  # noqa: E402

from tlgeo.hooks.edits import Edit  # noqa: E402
from tlgeo.evals.lm_eval_model import TLGeoLM, parse_index_list  # noqa: E402
from tlgeo.evals.perplexity import perplexity  # noqa: E402
from tlgeo.evals.zeroshot import encode_pair, load_task, score_items  # noqa: E402

DATA = Path(__file__).parents[1] / "data"


def req(kind, *args):
    return Instance(request_type=kind, doc={}, arguments=args, idx=0)


def test_tlgeo_not_importing_lm_eval():
    import subprocess

    code = "import sys, tlgeo, tlgeo.evals.zeroshot; assert 'lm_eval' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_registered_and_model_args(llama):
    from lm_eval.api.registry import get_model

    assert get_model("tlgeo") is TLGeoLM
    lm = TLGeoLM.create_from_arg_string(
        "pretrained=tiny:llama,site=value_excl_self,s_par=0,skip_first=1,layers=1-2,heads=0|3,batch_size=4",
        {"batch_size": 1, "max_batch_size": None, "device": "cpu"},
    )
    assert lm.batch_size == 4  # model args win over lm-eval's default
    lm2 = TLGeoLM.create_from_arg_obj({"pretrained": "tiny:llama", "batch_size": 2}, {"batch_size": 1, "device": "cpu"})
    assert lm2.batch_size == 2 and lm2.edits == []  # the CLI path
    assert lm.describe() == [Edit("value_excl_self", s_par=0.0, skip_first=1, layers=(1, 2), heads=(0, 3)).describe()]
    assert parse_index_list("3") == 3 and parse_index_list("all") is None
    with pytest.raises(ValueError, match="index list"):
        parse_index_list("1-x")
    with pytest.raises(TypeError, match="unknown tlgeo model args"):
        TLGeoLM(model=llama, sitee="attn")


def test_loglikelihood_equals_zeroshot(llama):
    lm = TLGeoLM(model=llama, site="attn", s_par=0.0, batch_size=3)
    items = load_task("openbookqa", DATA / "zeroshot")
    pairs = [(c, x) for it in items for c, x in zip(it.contexts, it.continuations)]
    got = lm.loglikelihood([req("loglikelihood", c, x) for c, x in pairs], disable_tqdm=True)
    want = score_items(llama, items, fwd_hooks=Edit("attn", s_par=0.0).hooks(llama))
    assert [g[0] for g in got] == [v for lps in want["logprobs"] for v in lps]
    plain = TLGeoLM(model=llama).loglikelihood([req("loglikelihood", *pairs[0])], disable_tqdm=True)
    assert plain[0][0] != got[0][0]  # the edit is active
    # is_greedy: a continuation made of the model's own argmax tokens
    ids = encode_pair(llama.tokenizer, "Hello", " x", prefix_token_id=256)[0]
    with torch.no_grad():
        nxt = int(llama.run_with_hooks(torch.tensor([ids]), fwd_hooks=lm.fwd_hooks)[0, -1].argmax())
    cont = llama.tokenizer.decode([nxt])
    assert lm.loglikelihood([req("loglikelihood", "Hello", cont)], disable_tqdm=True)[0][1]


def test_rolling_and_generation(llama):
    lm = TLGeoLM(model=llama, site="attn", s_par=0.5, max_length=32)
    text = "the quick brown fox jumps over the lazy dog " * 3
    (ll,) = lm.loglikelihood_rolling([req("loglikelihood_rolling", text)], disable_tqdm=True)
    res = perplexity(llama, text, context=32, fwd_hooks=lm.fwd_hooks, prepend_bos=True)
    assert res.n_tokens == len(text.encode())  # every byte token scored
    assert ll == pytest.approx(-res.nll * res.n_tokens, rel=1e-6)
    out = lm.generate_until([req("generate_until", "abc", {"until": ["\n"], "max_gen_toks": 5})], disable_tqdm=True)
    assert isinstance(out[0], str) and "\n" not in out[0]
    full = lm.generate("abc", 5)
    assert len(llama.tokenizer(full, add_special_tokens=False)["input_ids"]) <= 5
    stop = full[1:2]
    if stop:
        assert lm.generate("abc", 5, until=[stop]) == full[: full.index(stop)]


def test_local_yaml_tasks_match_zeroshot(llama, monkeypatch):
    """lm-eval's own pipeline (local YAML tasks, local jsonl) gives tlgeo.evals.zeroshot's numbers."""
    from lm_eval.tasks import TaskManager

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.chdir(DATA)  # the YAMLs name their data files relative to tests/data
    tm = TaskManager(include_path=str(DATA / "lm_eval"), include_defaults=False)  # not lm-eval's ~10,000 YAMLs
    lm = TLGeoLM(model=llama, site="value_excl_self", s_par=0.0, skip_first=1, batch_size=4)
    res = lm_eval.simple_evaluate(
        model=lm,
        tasks=["tlgeo_tiny_arc", "tlgeo_tiny_winogrande"],
        task_manager=tm,
        log_samples=True,
        bootstrap_iters=0,
    )
    hooks = Edit("value_excl_self", s_par=0.0, skip_first=1).hooks(llama)
    for task, name in [("tlgeo_tiny_arc", "arc_easy"), ("tlgeo_tiny_winogrande", "winogrande")]:
        items = load_task(name, DATA / "zeroshot")
        want = score_items(llama, items, fwd_hooks=hooks)
        samples = sorted(res["samples"][task], key=lambda s: s["doc_id"])
        assert len(samples) == len(items)
        for s, lps in zip(samples, want["logprobs"]):
            got = [float(r[0][0]) for r in s["resps"]]
            assert got == pytest.approx(lps, abs=1e-9)
        assert res["results"][task]["acc,none"] == pytest.approx(want["correct"].mean())
