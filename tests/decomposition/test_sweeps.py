import json
import math

import pytest
import torch

import tlgeo.decomposition.sweeps as sw
from tlgeo.evals.perplexity import perplexity
from tlgeo.hooks.edits import Edit
from tlgeo.decomposition.sweeps import layer_sweep, sensitivity_sweep, sweep_points
from tlgeo.hooks.resume import resume_forward

TEXT_KW = dict(context=64, max_tokens=200, batch_size=2)


@pytest.fixture(scope="module")
def text():
    from tlgeo.data import load_text

    return load_text("wikitext2")[:5000]


def test_sweep_points_grid_and_errors():
    pts = sweep_points(["value_excl_self", "diag"], (0, 1), (0.5,))
    assert [(p.site, p.axis, p.scale) for p in pts] == [
        ("value_excl_self", "s_par", 0.0),
        ("value_excl_self", "s_par", 1.0),
        ("value_excl_self", "s_perp", 0.5),
        ("diag", "s_par", 0.0),
        ("diag", "s_par", 1.0),
    ]  # diag: no s_perp axis
    assert pts[2].s_par == 1.0 and pts[2].s_perp == 0.5 and pts[1].is_noop
    assert len(sweep_points()) == 5 * (11 + 7) + 11
    for bad in (
        dict(sites=[]),
        dict(sites=["nope"]),
        dict(s_par_grid=(), s_perp_grid=()),
        dict(sites=["diag"], s_par_grid=()),
        dict(s_par_grid=(0, float("nan"))),
        dict(s_par_grid=(0, 0)),
    ):
        with pytest.raises(ValueError):
            sweep_points(**bad)


def test_bad_input_fails_before_any_work(llama, text, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("work started")

    monkeypatch.setattr(sw, "_corpus", boom)
    monkeypatch.setattr(sw, "_clean_pass", boom)
    with pytest.raises(ValueError, match="unknown site"):
        sensitivity_sweep(llama, text, sites=["attn", "bogus"])
    with pytest.raises(ValueError, match="empty sweep"):
        sensitivity_sweep(llama, text, s_par_grid=(), s_perp_grid=())
    with pytest.raises(ValueError, match="skip_first"):
        sensitivity_sweep(llama, text, skip_first=3)
    with pytest.raises(ValueError, match="out of range"):
        layer_sweep(llama, text, "attn", 7, (0.0,))
    monkeypatch.undo()
    with pytest.raises(ValueError, match="n_ctx"):
        sensitivity_sweep(llama, text, context=10_000)
    with pytest.raises(ValueError, match="empty corpus"):
        sensitivity_sweep(llama, "   ", **TEXT_KW)


def test_sweep_matches_perplexity_and_reuses_unedited(llama, text, monkeypatch):
    calls = []
    real = sw._edited_pass
    monkeypatch.setattr(sw, "_edited_pass", lambda *a: calls.append(1) or real(*a))
    df = sensitivity_sweep(
        llama,
        text,
        sites=["value_excl_self", "mlp", "diag"],
        s_par_grid=(0, 1, 2.5),
        s_perp_grid=(0.5, 1),
        skip_first=1,
        **TEXT_KW,
    )
    assert list(df.columns) == sw.COLUMNS
    assert len(df) == 3 + 2 + 3 + 2 + 3 and len(calls) == len(df) - 5  # five (1, 1) points not run
    base = perplexity(llama, text, **TEXT_KW)
    assert math.isclose(df.attrs["baseline_ppl"], base.ppl, rel_tol=1e-6)
    for r in df.itertuples():
        if r.s_par == 1 and r.s_perp == 1:
            assert r.delta_ppl == 0 and r.ppl == df.attrs["baseline_ppl"]
            continue
        ref = perplexity(llama, text, fwd_hooks=Edit(r.site, r.s_par, r.s_perp, skip_first=1).hooks(llama), **TEXT_KW)
        assert math.isclose(r.ppl, ref.ppl, rel_tol=1e-5), (r, ref.ppl)
        assert r.n_tokens == ref.n_tokens == base.n_tokens
        assert math.isclose(r.delta_ppl, ref.ppl - base.ppl, rel_tol=1e-4, abs_tol=1e-6)
    assert (df.loc[df.s_par != 1, "delta_ppl"].abs() > 1e-6).all()


def test_interrupted_sweep_resumes_without_loss_or_duplicates(llama, text, tmp_path, monkeypatch):
    kw = dict(sites=["attn", "value_full"], s_par_grid=(0, 0.5, 1), s_perp_grid=(0, 1), skip_first=1, **TEXT_KW)
    full = sensitivity_sweep(llama, text, **kw)
    path = tmp_path / "sweep.jsonl"
    real_edit, real_clean = sw._edited_pass, sw._clean_pass
    calls = []

    def dies_after_three(*a):
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append(1)
        return real_edit(*a)

    monkeypatch.setattr(sw, "_edited_pass", dies_after_three)
    with pytest.raises(KeyboardInterrupt):
        sensitivity_sweep(llama, text, log_path=path, **kw)
    lines = [json.loads(l) for l in path.read_text().splitlines()]
    assert len(lines) == 1 + 3  # unedited + three edits, each written as soon as measured

    calls.clear()
    clean = []
    monkeypatch.setattr(sw, "_edited_pass", lambda *a: calls.append(1) or real_edit(*a))
    monkeypatch.setattr(sw, "_clean_pass", lambda *a, **k: clean.append(k) or real_clean(*a, **k))
    df = sensitivity_sweep(llama, text, log_path=path, **kw)
    assert len(calls) == 6 - 3  # only the missing points
    assert clean == [{"need_loss": False}]  # unedited loss read back; only the prefix is rerun
    keys = [tuple(json.dumps(l[k]) for k in sw.KEY) for l in map(json.loads, path.read_text().splitlines())]
    assert len(keys) == len(set(keys)) == 1 + 6
    assert not df.duplicated(["site", "axis", "scale"]).any()
    torch.testing.assert_close(torch.tensor(df.ppl.values), torch.tensor(full.ppl.values), rtol=1e-6, atol=0)

    calls.clear()
    clean.clear()
    again = sensitivity_sweep(llama, text, log_path=path, **kw)  # all done: no forward at all
    assert calls == [] and clean == []
    assert again.equals(df)


def test_layer_sweep_matches_single_layer_edit(llama, text):
    df = layer_sweep(llama, text, "attn", 2, (0.0, 1.0, 2.0), **TEXT_KW)
    assert list(df.columns) == ["site", "layer", *sw.COLUMNS[1:]] and (df.layer == 2).all()
    base = perplexity(llama, text, **TEXT_KW).ppl
    for r in df.itertuples():
        ref = perplexity(llama, text, fwd_hooks=Edit("attn", s_par=r.scale, layers=2).hooks(llama), **TEXT_KW)
        assert math.isclose(r.ppl, ref.ppl, rel_tol=1e-5)
        assert math.isclose(r.delta_ppl, ref.ppl - base, abs_tol=1e-4)
    perp = layer_sweep(llama, text, "value_full", 1, (0.0,), axis="s_perp", **TEXT_KW)
    ref = perplexity(llama, text, fwd_hooks=Edit("value_full", s_perp=0.0, layers=1).hooks(llama), **TEXT_KW)
    assert math.isclose(perp.ppl.iloc[0], ref.ppl, rel_tol=1e-5) and perp.s_par.iloc[0] == 1.0


@pytest.mark.real
def test_smollm2_layer_resume_matches_full_forward(smollm2):
    from tlgeo.data import load_text

    text = load_text("wikitext2")
    ids = smollm2.to_tokens(text[:400])[:, :32]
    e = Edit("value_excl_self", s_par=0.0, layers=25)
    with torch.inference_mode():
        full = smollm2.run_with_hooks(ids, fwd_hooks=e.hooks(smollm2))
        _, cache = smollm2.run_with_cache(ids, names_filter="blocks.25.hook_resid_pre")
        out = resume_forward(smollm2, cache["blocks.25.hook_resid_pre"], 25, e.hooks(smollm2))
    torch.testing.assert_close(out, full, rtol=1e-4, atol=1e-3)
    df = layer_sweep(smollm2, text, "value_excl_self", 25, (0.0,), context=32, max_tokens=62, batch_size=2)
    ref = perplexity(smollm2, text, context=32, max_tokens=62, fwd_hooks=e.hooks(smollm2))
    assert math.isclose(df.ppl.iloc[0], ref.ppl, rel_tol=1e-4)
