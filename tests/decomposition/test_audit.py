import json

import pytest
import torch

from tlgeo.decomposition.audit import audit_overall, post_wo_audit, token_audit
from tlgeo.hooks.edits import Edit
from tlgeo.geometry import scale_components

COLS = ["perturbation_mean", "energy_mean", "retained_mean", "perturbation_pooled", "energy_pooled", "retained_pooled"]


def _attn_out(model, tokens, layer, edit=None):
    got = {}

    def cap(t, hook):
        got["y"] = t.detach().double()

    hooks = (edit.hooks(model) if edit is not None else []) + [(f"blocks.{layer}.hook_attn_out", cap)]
    with torch.inference_mode():
        model.run_with_hooks(tokens, return_type=None, fwd_hooks=hooks)
    return got["y"][:, 1:]  # position 0 left out, as by default


def _direct(y, y_new):
    rho = (y_new - y).norm(dim=-1) / y.norm(dim=-1)
    kappa = y_new.norm(dim=-1) / y.norm(dim=-1)
    return {
        "perturbation_mean": rho.mean(),
        "energy_mean": (rho**2).mean(),
        "retained_mean": kappa.mean(),
        "perturbation_pooled": (y_new - y).norm(dim=-1).sum() / y.norm(dim=-1).sum(),
        "energy_pooled": ((y_new - y) ** 2).sum() / (y**2).sum(),
        "retained_pooled": y_new.norm(dim=-1).sum() / y.norm(dim=-1).sum(),
    }


def test_token_audit_residual_removal_is_pythagorean():
    """s_par = 0 on the residual update leaves y_perp: kappa^2 + rho^2 = 1 per token."""
    gen = torch.Generator().manual_seed(0)
    y, z = torch.randn(50, 16, generator=gen), torch.randn(50, 16, generator=gen)
    t = token_audit(y, scale_components(y, z, 0.0))
    torch.testing.assert_close(t["kappa"] ** 2 + t["rho"] ** 2, torch.ones(50, dtype=torch.float64))
    cos = torch.nn.functional.cosine_similarity(y, z, dim=-1).double()
    torch.testing.assert_close(t["rho"], cos.abs(), atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="differ in shape"):
        token_audit(y, y[:, :3])


@pytest.mark.parametrize("model_name", ["llama", "gpt2"])  # gpt2: W_O with a bias
def test_audit_each_equals_two_forwards(model_name, tokens, request):
    model = request.getfixturevalue(model_name)
    df = post_wo_audit(model, tokens, mode="each", layers=[2])
    assert len(df) == 3
    for _, row in df.iterrows():
        e = Edit(row["site"], s_par=0.0, layers=int(row["layer"]))
        ref = _direct(_attn_out(model, tokens, row["layer"]), _attn_out(model, tokens, row["layer"], e))
        for c in COLS:
            assert row[c] == pytest.approx(float(ref[c]), rel=1e-5, abs=1e-8), (row["site"], c)
    # exclude-self perturbs more than residual attention (the paper's point), on this tiny model
    mean = df.groupby("site")["perturbation_mean"].mean()
    assert mean["value_full"] > mean["attn"] and mean["value_excl_self"] > 0


def test_audit_all_compares_each_layer_with_its_own_unedited_output(llama, tokens):
    site, last = "value_excl_self", 2
    df = post_wo_audit(llama, tokens, sites=[site], mode="all")
    row = df[df.layer == last].iloc[0]
    # unedited output of the last layer given the edited upstream: edit layers 0..1 only
    y = _attn_out(llama, tokens, last, Edit(site, s_par=0.0, layers=(0, 1)))
    y_new = _attn_out(llama, tokens, last, Edit(site, s_par=0.0))
    ref = _direct(y, y_new)
    for c in COLS:
        assert row[c] == pytest.approx(float(ref[c]), rel=1e-5), c
    each = post_wo_audit(llama, tokens, sites=[site], mode="each", layers=[last]).iloc[0]
    assert each["perturbation_mean"] != pytest.approx(row["perturbation_mean"], rel=1e-6)


def test_audit_noop_and_overall(llama, tokens):
    df = post_wo_audit(llama, tokens, s_par=1.0, mode="all")
    assert (df["perturbation_mean"] == 0).all() and (df["retained_mean"] == 1).all()
    df = post_wo_audit(llama, tokens, sites=["attn", "value_full"], mode="all", skip_first=0)
    ov = audit_overall(df).set_index("site")
    for site, g in df.groupby("site"):
        # same token count per layer: token-weighted overall == mean of per-layer means
        assert ov.loc[site, "perturbation_mean"] == pytest.approx(g["perturbation_mean"].mean())
        assert ov.loc[site, "n_layers"] == llama.cfg.n_layers
        assert ov.loc[site, "energy_pooled"] == pytest.approx(g["diff_sq_sum"].sum() / g["y_sq_sum"].sum())
    with pytest.raises(ValueError, match="empty"):
        audit_overall(df.iloc[:0])


def test_audit_resumes_from_log(llama, tokens, tmp_path):
    path = tmp_path / "audit.jsonl"
    first = post_wo_audit(llama, tokens, sites=["attn"], layers=[1, 2], log_path=path)
    assert len(path.read_text().splitlines()) == 2
    lines = [json.loads(l) for l in path.read_text().splitlines()]
    lines[0]["perturbation_mean"] = 123.0  # a stored row is read back, not recomputed
    path.write_text("".join(json.dumps(l) + "\n" for l in lines))
    again = post_wo_audit(llama, tokens, sites=["attn"], layers=[1, 2], log_path=path)
    assert again["perturbation_mean"].iloc[0] == 123.0
    assert again["perturbation_mean"].iloc[1] == first["perturbation_mean"].iloc[1]
    assert len(path.read_text().splitlines()) == 2


def test_audit_bad_inputs(llama, tokens):
    with pytest.raises(ValueError, match="unknown mode"):
        post_wo_audit(llama, tokens, mode="some")
    with pytest.raises(ValueError, match="cannot be audited"):
        post_wo_audit(llama, tokens, sites=["mlp"])
    with pytest.raises(ValueError, match="no sites"):
        post_wo_audit(llama, tokens, sites=[])
    with pytest.raises(KeyError, match="unknown site"):
        post_wo_audit(llama, tokens, sites=["nope"])
    with pytest.raises(ValueError, match="n_ctx"):
        post_wo_audit(llama, torch.zeros(1, llama.cfg.n_ctx + 1, dtype=torch.long))
    with pytest.raises(ValueError, match="at least 2"):
        post_wo_audit(llama, tokens[:, :1])
    with pytest.raises(ValueError, match="no layers left"):
        post_wo_audit(llama, tokens, layers=[0], skip_first=1)
