"""The intervention protocol: every hook-based intervention implements it; intervene composes them."""

import pytest
import torch

from tlgeo.hooks import ComplementEdit, Edit, Intervention, Perturbation, SubspaceEdit, hooks_of, intervene


def _logits(model, toks, hooks=()):
    with torch.no_grad():
        return model.run_with_hooks(toks, fwd_hooks=list(hooks))


def _interventions(model):
    d = model.cfg.d_model
    basis = torch.linalg.qr(torch.randn(2, d, 2, generator=torch.Generator().manual_seed(0)))[0]
    return [
        Edit("attn", s_par=0.0),
        Perturbation("angle", 0.5, layers=(1,)),
        SubspaceEdit(1, basis, factor=0.5),
        ComplementEdit(1, (basis,), factor=0.5),
    ]


def test_every_intervention_class_implements_the_protocol(llama):
    for i in _interventions(llama):
        assert isinstance(i, Intervention), type(i).__name__
        hooks = i.hooks(llama)
        assert hooks and all(isinstance(n, str) and callable(f) for n, f in hooks)
    assert not isinstance("attn", Intervention)


def test_intervene_equals_run_with_hooks_and_cleans_up(llama, tokens):
    toks = tokens[:2]
    edit, pert = _interventions(llama)[:2]
    expected = _logits(llama, toks, hooks_of(llama, edit, pert))
    clean = _logits(llama, toks)
    assert not torch.allclose(expected, clean)
    with intervene(llama, edit, pert):
        got = _logits(llama, toks)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="boom"):
        with intervene(llama, edit, pert):
            raise RuntimeError("boom")
    torch.testing.assert_close(_logits(llama, toks), clean, rtol=0, atol=0)  # no hook left behind


def test_a_non_intervention_is_refused_by_name(llama):
    with pytest.raises(TypeError, match="str"):
        hooks_of(llama, Edit("attn"), "attn")
