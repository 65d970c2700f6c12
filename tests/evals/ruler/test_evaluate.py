import pytest
import torch

from tlgeo import Edit
from tlgeo.evals.ruler import compare_ruler, evaluate_ruler, generate_answers, greedy_generate, make_task
from tlgeo.runner.results import IDENTITY


def test_generation_kv_cache_and_noop_edit(llama, tokens):
    """Greedy decoding with the KV cache equals decoding without it, edited or not
    (value-space edits see q < k queries while decoding); a no-op edit changes nothing."""
    toks = tokens[:, :16]
    base = greedy_generate(llama, toks, 5, use_kv_cache=True)
    assert base.shape == (2, 5)
    assert torch.equal(base, greedy_generate(llama, toks, 5, use_kv_cache=False))
    noop = Edit("value_excl_self", s_par=1.0).hooks(llama)
    assert torch.equal(base, greedy_generate(llama, toks, 5, fwd_hooks=noop))
    for site in ("value_excl_self", "value_full"):
        hooks = Edit(site, s_par=-3.0, skip_first=1).hooks(llama)
        cached = greedy_generate(llama, toks, 5, fwd_hooks=hooks, use_kv_cache=True)
        assert torch.equal(cached, greedy_generate(llama, toks, 5, fwd_hooks=hooks, use_kv_cache=False))
    # a strong edit is active during generation: next-token logits change
    hooks = Edit("value_full", s_par=-3.0).hooks(llama)
    with torch.inference_mode():
        a = llama(toks)[:, -1]
        b = llama.run_with_hooks(toks, fwd_hooks=hooks)[:, -1]
    assert not torch.allclose(a, b)


def test_generation_unembeds_only_the_last_position(llama, tokens):
    """The prompt's logits are never made, and the tokens are those of a plain greedy
    loop over full forwards (argmax of the last position, appended each step)."""
    toks = tokens[:, :12]
    shapes = []
    seen = [("unembed.hook_out", lambda x, hook: shapes.append(tuple(x.shape)))]
    for kv in (True, False):
        shapes.clear()
        out = greedy_generate(llama, toks, 4, fwd_hooks=seen, use_kv_cache=kv)
        assert shapes and all(s[1] == 1 for s in shapes), shapes
        ref = toks
        with torch.inference_mode():
            for _ in range(4):
                ref = torch.cat([ref, llama(ref)[:, -1].argmax(-1, keepdim=True)], dim=1)
        assert torch.equal(out, ref[:, toks.shape[1] :])


def test_evaluate_resumes(llama, tmp_path):
    log = tmp_path / "ruler.jsonl"
    kw = dict(
        tasks=["niah_single", "vt"], lengths=(1000,), n_samples=2, max_new_tokens=2, log_path=log, haystack="synthetic"
    )
    df = evaluate_ruler(llama, **kw)
    assert list(df.columns[:12]) == [*IDENTITY, "label", "task", "length", "n", "haystack", "seed"]
    assert len(df) == 2 and df["score"].between(0, 100).all() and (df["n"] == 2).all()
    assert len(log.read_text().splitlines()) == 2
    again = evaluate_ruler(llama, **kw)  # from the log: same rows, nothing recomputed
    assert again.equals(df)  # a fresh row is what a resumed row is, column for column
    both = compare_ruler(llama, [Edit("value_full", s_par=1.0, skip_first=1)], **kw)
    assert len(both) == 4 and len(log.read_text().splitlines()) == 4
    assert both.groupby("task")["preds"].apply(lambda p: p.iloc[0] == p.iloc[1]).all()  # no-op edit


def test_generate_answers_cut_at_stop(llama):
    samples = make_task("niah_single", llama, 400, 3, haystack="synthetic")
    preds = generate_answers(llama, samples, max_new_tokens=3, batch_size=2)
    assert len(preds) == 3 and all(isinstance(p, str) and "<|eos|>" not in p for p in preds)


@pytest.mark.real
def test_smollm2_niah_single(smollm2):
    # measured: 100 (3/3 found) with 3 samples at 1024 tokens and at 512; the first at 512 alone keeps
    # the test to a few seconds
    df = evaluate_ruler(
        smollm2, tasks=["niah_single"], lengths=(512,), n_samples=1, haystack="corpora", max_new_tokens=10, batch_size=1
    )
    assert df["score"].iloc[0] > 0
