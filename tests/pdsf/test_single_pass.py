"""Single-pass edits and the static/dynamic split of F on a tiny model: a no-op edit changes
nothing, each condition edits what it says, donors come from another group, the F of the
dynamics is the geometry's F, the F_dynamic condition rotates during generation, bad input."""

import numpy as np
import pandas as pd
import pytest
import torch

from tlgeo.geometry.rotation import complement_part, edit_complement, signed_permutation
from tlgeo.geometry.subspaces import fit_pdsf, split_pdsf
from tlgeo.hooks.subspace import ComplementEdit
from tlgeo.pdsf import (
    SINGLE_PASS,
    dynamic_basis,
    f_dynamics,
    greedy_continuations,
    next_group_donors,
    pdsf_states,
    persistent_rotations,
    run_single_pass,
    single_pass,
    single_pass_summary,
)
from tlgeo.pdsf.prompts import PromptSet


def _set(n_groups=3, per=4):
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma"]
    texts = [f"{words[g]} {words[(g + v) % 6]} {'y' * (v + 1)} {g}{v}" for g in range(n_groups) for v in range(per)]
    return PromptSet(
        "tiny", texts, [f"g{g}" for g in range(n_groups) for _ in range(per)], [f"p{i}" for i in range(len(texts))]
    )


def _orthonormal(b, d, ks, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.linalg.qr(torch.randn(b, d, sum(ks), generator=g, dtype=torch.float64)).Q
    return tuple(torch.split(q, list(ks), dim=2))


def test_complement_edits_in_float64():
    b, d = 5, 12
    bases = _orthonormal(b, d, (1, 3, 2))
    h = torch.randn(b, d, dtype=torch.float64)
    f = complement_part(h, bases)
    for basis in bases:
        assert torch.einsum("bd,bdk->bk", f, basis).abs().max() < 1e-12
    assert torch.equal(edit_complement(h, bases, factor=1.0), torch.zeros_like(h))  # a no-op, exactly
    torch.testing.assert_close(edit_complement(h, bases, factor=0.5), -0.5 * f)
    perm, signs = signed_permutation(d, 3)
    assert sorted(perm.tolist()) == list(range(d)) and set(signs.tolist()) <= {-1.0, 1.0}
    assert torch.equal(signed_permutation(d, 3)[0], perm)
    donor = torch.randn(b, d, dtype=torch.float64)
    for kw in ({"donor": donor}, {"mix": (perm.expand(b, d), signs.expand(b, d))}):
        new = h + edit_complement(h, bases, **kw)
        for basis in bases:  # the parts outside F untouched
            torch.testing.assert_close(torch.einsum("bd,bdk->bk", new, basis), torch.einsum("bd,bdk->bk", h, basis))
        torch.testing.assert_close(complement_part(new, bases).norm(dim=-1), f.norm(dim=-1))  # ||F|| kept
    moved = h + edit_complement(h, bases, donor=donor)
    cos = torch.nn.functional.cosine_similarity(complement_part(moved, bases), complement_part(donor, bases), dim=-1)
    torch.testing.assert_close(cos, torch.ones(b, dtype=torch.float64))
    raw = h + edit_complement(h, bases, mix=(perm.expand(b, d), signs.expand(b, d)), project=False)
    assert torch.einsum("bd,bdk->bk", raw - h, bases[1]).abs().max() > 1e-3  # the authors' mix leaves F
    with pytest.raises(ValueError, match="exactly one of"):
        edit_complement(h, bases)


def test_complement_edit_hook_once_per_forward_and_a_no_op(llama, tokens):
    b, d = tokens.shape[0], llama.cfg.d_model
    bases = tuple(x.float() for x in _orthonormal(b, d, (1, 3)))
    clean = llama(tokens)
    assert torch.equal(llama.run_with_hooks(tokens, fwd_hooks=ComplementEdit(1, bases, factor=1.0).hooks(llama)), clean)
    calls = []
    name, fn = ComplementEdit(1, bases, factor=0.2).hooks(llama)[0]
    out = llama.run_with_hooks(tokens, fwd_hooks=[(name, lambda h, hook: (calls.append(1), fn(h, hook))[1])])
    assert len(calls) == 1 and not torch.allclose(out[:, -1], clean[:, -1])
    torch.testing.assert_close(out[:, :-1], clean[:, :-1])
    with pytest.raises(ValueError, match=r"donor must be \[2, 64\]"):
        ComplementEdit(1, bases, donor=torch.zeros(3, d))
    with pytest.raises(ValueError, match="exactly one of"):
        ComplementEdit(1, bases, factor=0.5, donor=torch.zeros(b, d))


def test_next_group_donors():
    assert next_group_donors(["a", "a", "b", "b", "b", "c"]).tolist() == [2, 3, 5, 5, 5, 0]
    assert next_group_donors(["a", "a", "a"]).tolist() == [1, 2, 0]


def test_single_pass_conditions_on_a_tiny_model(llama):
    ps = _set()
    st = pdsf_states(llama, ps, bos=True)
    res = run_single_pass(llama, st, conditions=SINGLE_PASS, layer=1, repeats=2, batch_size=5)
    rows = res.rows
    reps = {c: 2 if c.endswith(("rotate", "mix")) else 1 for c in SINGLE_PASS}
    assert len(rows) == sum(reps.values()) * len(ps) and (rows["kl"] >= 0).all()
    s = res.summary.set_index("condition")
    assert set(s.index) == set(SINGLE_PASS) and (s["n_prompts"] == len(ps)).all()
    assert (s.loc[["D_rotate", "S_rotate", "F_top_rotate", "F_mix", "F_transplant"], "angle_at_edit"] > 1).all()
    assert s.loc["F_attenuate", "angle_at_edit"] < 1e-3  # scaling keeps the direction of F
    assert (s["kl_mean"] > 0).all()
    ang = res.angles
    assert set(ang["state"]) == set(range(1, llama.cfg.n_layers + 1))
    # alpha 0: attenuation by a factor 1 changes nothing, bit for bit
    none, _ = single_pass(
        llama,
        st.tokens,
        ps.groups,
        st.states.states[1],
        st.u,
        layer=1,
        conditions=("F_attenuate", "D_attenuate"),
        alpha=0.0,
    )
    assert (none["kl"] == 0).all() and not none["flipped"].any() and (none["angle_at_edit"] == 0).all()
    summary = single_pass_summary(rows)
    assert list(summary["condition"]) == list(SINGLE_PASS)
    with pytest.raises(ValueError, match="unknown single-pass condition 'P_rotate'"):
        run_single_pass(llama, st, conditions=("P_rotate",))
    with pytest.raises(ValueError, match="layer 9 out of range"):
        run_single_pass(llama, st, layer=9)


def test_f_dynamics_split_and_the_dynamic_condition(llama):
    ps = _set(2, 4)
    st = pdsf_states(llama, ps, bos=True)
    base = greedy_continuations(llama, st.tokens, 5, batch_size=8)
    dyn = f_dynamics(llama, st.tokens, base, st.states.states, st.u, basis_layer=2, batch_size=3)
    t = dyn.layers
    assert list(t["layer"]) == list(range(1, llama.cfg.n_layers + 1))
    assert t["static_share"].between(0, 1).all() and t["f_share_of_state"].between(0, 1).all()
    first = dyn.steps[dyn.steps["step"] == 0]
    np.testing.assert_allclose(first["cos_to_first"], 1.0, atol=1e-9)
    assert dyn.basis.shape[0] == llama.cfg.d_model and 2 <= dyn.basis.shape[1] <= 64
    # step 0 of the continuation is the prompt's last token: its F is the geometry's F of that state
    from tlgeo.pdsf.dynamics import _f_parts

    h, u = st.states.states[2].double(), st.u.double()
    basis = fit_pdsf(h, u)
    torch.testing.assert_close(_f_parts(h[:, None], u, basis, "exact")[:, 0], split_pdsf(h, u, basis)["F"])
    df, gens = persistent_rotations(
        llama,
        st.tokens,
        ps.groups,
        st.states.states[2],
        st.u,
        layer=2,
        conditions=("F_dynamic",),
        max_new_tokens=5,
        batch_size=4,
        baseline=base,
        f_dynamic=dyn.basis,
    )
    assert len(df) == len(ps) and (df["kl_mean"] > 0).all()
    with pytest.raises(ValueError, match="needs the dynamic basis"):
        persistent_rotations(
            llama, st.tokens, ps.groups, st.states.states[2], st.u, layer=2, conditions=("F_dynamic",), max_new_tokens=2
        )
    with pytest.raises(ValueError, match="at least 2 generated steps"):
        f_dynamics(llama, st.tokens, base[:, :1], st.states.states, st.u)
    with pytest.raises(ValueError, match="anchor='step' needs u_steps"):
        f_dynamics(llama, st.tokens, base, st.states.states, st.u, anchor="step")


def test_dynamic_basis_of_a_known_spectrum():
    q = torch.linalg.qr(torch.randn(10, 10, dtype=torch.float64)).Q
    cov = q @ torch.diag(torch.tensor([4.0, 4.0, 4.0, 4.0] + [0.0] * 6, dtype=torch.float64)) @ q.T
    basis, pr = dynamic_basis(cov)
    assert pr == pytest.approx(4.0) and basis.shape == (10, 4)
    torch.testing.assert_close(basis @ basis.T, q[:, :4] @ q[:, :4].T)


def test_single_pass_plot(llama):
    from tlgeo.pdsf.plots import plot_f_dynamics, plot_single_pass

    s = pd.DataFrame({"condition": ["D_rotate", "F_mix"], "kl_mean": [0.1, 2.0], "kl_sem": [0.01, np.nan]})
    a = pd.DataFrame(
        {"condition": ["D_rotate"] * 2 + ["F_mix"] * 2, "state": [1, 2, 1, 2], "angle_mean": [30, 10, 80, 60]}
    )
    assert len(plot_single_pass(s, a).axes) == 2
    dyn = pd.DataFrame({"layer": [1, 2], "static_share": [0.8, 0.6], "f_share_of_state": [0.9, 0.7]})
    steps = pd.DataFrame({"layer": [1, 1, 2, 2], "step": [0, 1, 0, 1], "cos_to_first": [1, 0.9, 1, 0.8]})
    assert len(plot_f_dynamics(dyn, steps).axes) == 2
    with pytest.raises(ValueError, match="needs a non-empty table"):
        plot_single_pass(pd.DataFrame(), a)


def test_single_pass_reads_out_the_last_position_only_as_the_full_forward_does(llama):
    from tlgeo.pdsf.generation import left_pad
    from tlgeo.pdsf.single_pass import _last_states, _readout_is_exact

    st = pdsf_states(llama, _set(1, 4), bos=True)
    toks, mask = left_pad(llama, st.tokens)
    names = [f"blocks.{l}.hook_resid_post" for l in range(1, llama.cfg.n_layers)]
    bases = tuple(x.float() for x in _orthonormal(len(st.tokens), llama.cfg.d_model, (1, 3)))
    hooks = ComplementEdit(1, bases, factor=0.3).hooks(llama)
    full, h_full = _last_states(llama, toks, mask, names, hooks, stop=False)
    assert _readout_is_exact(llama, full, h_full[-1])
    assert not _readout_is_exact(llama, full, h_full[-2])  # the check can fail
    fast, h_fast = _last_states(llama, toks, mask, names, hooks, stop=True)
    torch.testing.assert_close(fast, full, rtol=1e-5, atol=1e-5)
    assert torch.equal(h_fast, h_full)
