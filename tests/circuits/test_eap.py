"""EAP against finite differences of exact edge patching, the parts against the whole, edge-patched runs at their
ends (every edge kept: the clean run; none: the corrupted run) and exact edge patching against path patching."""

import pytest
import torch

from tlgeo.circuits.eap import eap_scores, run_metric
from tlgeo.circuits.edges import exact_scores, faithfulness_runs
from tlgeo.circuits.graph import Graph, graph_of
from tlgeo.models import tiny_model
from tlgeo.patching.tasks import build_task


@pytest.fixture(scope="module", params=["gpt2", "llama", "gpt_neox"])
def case(request):
    model = tiny_model(request.param, dtype=torch.float64)
    task = build_task("induction", model, n=4, seed=0)

    def metric(logits, rows):  # float64 throughout (the tasks' metrics are float32)
        return torch.log_softmax(logits.double(), -1).gather(1, task.correct[rows, :1].to(logits.device))[:, 0]

    return request.param, model, task, metric


def test_graph_counts_and_edges():
    g = Graph(n_layers=2, n_heads=4, n_kv=2)
    assert g.n_senders == 1 + 2 * 5 and g.n_receivers == 2 * (4 + 2 + 2 + 1) + 1
    # block 0's q/k/v read the input only; its MLP the input and block 0's heads; the logits everything
    assert g.prefix(0) == 1 and g.prefix(g.mlp_receiver(0)) == 5 and g.prefix(g.logits_receiver) == 11
    assert Graph(2, 4, 2, parallel=True).prefix(g.mlp_receiver(1)) == 6  # a parallel MLP: not its own block's heads
    assert g.n_edges == int(g.valid.sum()) == 8 * 1 + 1 * 5 + 8 * 6 + 1 * 10 + 11
    with pytest.raises(ValueError, match="does not write before"):
        g.edge_index("L1H0", "L0H1.q")


def test_eap_equals_finite_differences(case):
    """Each EAP score is the derivative of the metric along the sender's change at the receiver's input: central
    differences of exact edge patching (Richardson-extrapolated) agree to 1e-6 relative (LayerNorm models, float64
    throughout) and 1e-4 (Llama: Hugging Face computes RMSNorm and the attention softmax in float32)."""
    kind, model, task, metric = case
    g = graph_of(model)
    sc = eap_scores(model, task.clean, task.corrupted, metric, batch_size=3)  # two batches
    edges = torch.nonzero(g.valid)[::9].tolist()

    def central(h):
        f = lambda t: exact_scores(  # noqa: E731
            model,
            g,
            task.clean,
            task.corrupted,
            edges,
            metric,
            clean_metric=0.0,  # noqa
            scale=t,
            max_rows=512,
        )
        return (f(h) - f(-h)) / (2 * h)

    fd = (4 * central(0.01) - central(0.02)) / 3
    eap = torch.tensor([float(sc.score[s, r]) for s, r in edges], dtype=torch.float64)
    assert fd.abs().max() > 1e-3  # the edges move the metric
    tol = 1e-4 if kind == "llama" else 1e-6
    assert float((eap - fd).abs().max() / fd.abs().max()) < tol


def test_parts_add_up_and_the_parallel_part_is_second_order(case):
    _, model, task, metric = case
    sc = eap_scores(model, task.clean, task.corrupted, metric)
    df = sc.table()
    assert len(df) == graph_of(model).n_edges
    assert (df["score_par"] + df["score_perp"] - df["score"]).abs().max() < 1e-12
    heads = df[df["sender_kind"] == "head"]
    assert (heads["score_self"] + heads["score_nonself"] - heads["score"]).abs().max() < 1e-12
    assert df.loc[df["sender_kind"] != "head", "score_self"].isna().all()
    # to first order a change along the receiver's residual does nothing through its scale-invariant norm
    # (J_norm(x) x = 0 up to the norm's epsilon): EAP's parallel part is that epsilon (measured 0.05-0.3 % of the
    # summed |score| on these models); EAP-IG's gradients, taken away from the clean residual, see more of it
    share = df["score_par"].abs().sum() / df["score"].abs().sum()
    assert 0 < share < 0.01
    ig = eap_scores(model, task.clean, task.corrupted, metric, ig_steps=3).table()
    assert ig["score_par"].abs().sum() / ig["score"].abs().sum() > 5 * share
    assert df["rank"].min() == 1 and sorted(df["rank"]) == list(range(1, len(df) + 1))


def test_edge_runs_at_their_ends(case):
    """Every edge kept is the clean run; none kept is the corrupted run (each receiver reads the corrupted
    residual); an exact edge score with scale 0 is 0."""
    _, model, task, metric = case
    g = graph_of(model)
    n = slice(0, task.n)
    clean = float(run_metric(model, task.clean, metric, n).mean())
    corr = float(run_metric(model, task.corrupted, metric, n).mean())
    got = faithfulness_runs(model, g, task.clean, task.corrupted, [g.valid.clone(), torch.zeros_like(g.valid)], metric)
    assert abs(clean - corr) > 1e-4
    assert float(got[0]) == pytest.approx(clean, abs=1e-9) and float(got[1]) == pytest.approx(corr, abs=1e-9)
    zero = exact_scores(
        model, g, task.clean, task.corrupted, [(0, 0), (1, g.logits_receiver)], metric, clean_metric=clean, scale=0.0
    )
    assert zero.abs().max() < 1e-9


def test_eap_ig_with_one_step_is_eap_at_the_clean_input(case):
    """EAP-IG's one step is alpha = 1: the clean input, so the same gradient as EAP."""
    _, model, task, metric = case
    a = eap_scores(model, task.clean, task.corrupted, metric)
    b = eap_scores(model, task.clean, task.corrupted, metric, ig_steps=1)
    assert torch.allclose(a.score, b.score, atol=1e-10)
    c = eap_scores(model, task.clean, task.corrupted, metric, ig_steps=3)
    assert not torch.allclose(a.score, c.score, atol=1e-6)


def test_bad_input_fails_in_one_line(case):
    _, model, task, metric = case
    with pytest.raises(ValueError, match="differ in shape"):
        eap_scores(model, task.clean, task.corrupted[:, 1:], metric)
    with pytest.raises(ValueError, match="ig_steps"):
        eap_scores(model, task.clean, task.corrupted, metric, ig_steps=-1)


@pytest.mark.parametrize(
    "family, kind", [("llama", "rms"), ("gemma3", "rms"), ("phi3", "rms"), ("gpt2", "layer"), ("gpt_neox", "layer")]
)
def test_the_norms_closed_form_vjp_is_autograds(family, kind):
    """The closed form of a block norm's vector-Jacobian product (LayerNorm; RMSNorm with its weight, or one plus it
    as Gemma's), folded into the receivers' input projections, is the one that equals autograd's of ``W_r gh_r``,
    and equals it on other cotangents too, written into a given buffer or not."""
    from tlgeo.circuits import eap as E
    from tlgeo.circuits.graph import norm_module

    model = tiny_model(family)
    norm = norm_module(model, "ln1", 1)
    with torch.no_grad():  # a weight away from its initial ones, so that w and 1 + w differ in what they give
        norm.weight.mul_(torch.linspace(0.5, 1.5, norm.weight.numel()))
    gen = torch.Generator().manual_seed(0)
    d = model.cfg.d_model
    x = torch.randn(2, 5, d, generator=gen) + 0.5  # a mean away from 0: the LayerNorm's centring matters
    gh, W = torch.randn(7, 2, 5, 3, generator=gen), torch.randn(7, d, 3, generator=gen)

    def autograd():
        return E._autograd_vjp(norm, x, (gh.reshape(7, 10, 3) @ W.transpose(1, 2)).view(7, 2, 5, d))

    form = E._norm_form(norm, x)
    assert form is not None and form[0] == kind
    got, want = E._norm_vjp(norm, x, gh, W, torch.float32), autograd()
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5 * want.abs().max())
    with torch.no_grad():  # an edit of the weight after the form was found: the product follows it
        norm.weight.add_(0.25)
    buf = torch.full((7, 2, 5, d), float("nan"))
    got, want = E._norm_vjp(norm, x, gh, W, torch.float32, buf), autograd()
    assert got is buf and torch.allclose(got, want, rtol=1e-5, atol=1e-5 * want.abs().max())
    assert E._find_form(torch.nn.Identity(), x) is None  # no closed form: autograd's
    got = E._norm_vjp(torch.nn.Identity(), x, gh, W, torch.float64)
    identity = (gh.reshape(7, 10, 3) @ W.transpose(1, 2)).view(7, 2, 5, d)  # the Jacobian of no norm is 1
    assert got.dtype == torch.float64 and torch.allclose(got.float(), identity, atol=1e-5)


def test_eap_of_prompts_no_corruption_changes_is_zero():
    """Clean and corrupted prompts the same: every sender's change is 0 and so is every score (no position is
    multiplied)."""
    model = tiny_model("llama")
    task = build_task("induction", model, n=4, seed=0)
    scores = eap_scores(model, task.clean, task.clean, lambda logits, rows: task.subset(rows).score(logits))
    assert scores.score.abs().max() == 0 and scores.par.abs().max() == 0 and scores.self_.abs().max() == 0


def test_a_bidirectional_program_multiplies_every_position(monkeypatch):
    """In a compiled program that attends both ways (tracr's reverse) a later token can change earlier positions, so
    EAP multiplies the senders' changes at every position; in a causal model from the first token that differs."""
    from tlgeo.circuits import eap as E
    from tlgeo.models import load_model

    seen = []
    real = E.changes
    monkeypatch.setattr(
        E, "changes", lambda a, b, positions, *rest: seen.append(positions.start) or real(a, b, positions, *rest)
    )
    for name, causal in (("zoo/tracr-reverse", False), ("zoo/tracr-frac-prevs", True)):
        model = load_model(name)
        assert model.cfg.attention_dir == ("causal" if causal else "bidirectional")
        task = build_task("tracr", model, n=4, seed=0)
        first = E.first_change(task.clean, task.corrupted)
        assert first > 0  # a prefix the two runs share
        eap_scores(model, task.clean, task.corrupted, lambda logits, rows: task.subset(rows).score(logits))
        assert seen.pop() == (first if causal else 0)


def test_the_products_a_slice_of_prompts_at_a_time_give_the_scores_of_all_at_once(case):
    """Scores summed slice by slice (one prompt a slice: the smallest budget; a batch of three, then one) equal the
    scores of each batch's prompts at once, EAP and EAP-IG; the slice is the budget's share, at least one prompt."""
    from tlgeo.circuits import eap as E

    _, model, task, metric = case
    g = graph_of(model)
    like = torch.zeros((), dtype=torch.float64)
    assert E.slice_prompts(g, 4, 5, model.cfg.d_model, like, 1) == 1
    assert E.slice_prompts(g, 4, 5, model.cfg.d_model, like, 1 << 40) == 4
    for steps in (0, 2):
        whole = eap_scores(model, task.clean, task.corrupted, metric, ig_steps=steps, batch_size=3, slice_bytes=1 << 40)
        sliced = eap_scores(model, task.clean, task.corrupted, metric, ig_steps=steps, batch_size=3, slice_bytes=1)
        for part in ("score", "score_par", "score_self"):
            a, b = whole.matrix(part), sliced.matrix(part)
            assert a.abs().max() > 0 and torch.allclose(a, b, rtol=1e-9, atol=1e-12 * a.abs().max())
    with pytest.raises(ValueError, match="slice_bytes"):
        eap_scores(model, task.clean, task.corrupted, metric, slice_bytes=0)


def test_a_metric_of_a_few_logits_reads_a_few_columns_of_the_unembedding_and_gets_autograds_gradients(monkeypatch):
    """The readout's backward multiplies only the unembedding's columns a logit-difference metric touches; the
    receivers' gradients are autograd's through the whole unembedding (its linearity checked once; a model whose
    unembedding is not ``h W_U + b_U`` keeps autograd's)."""
    from tlgeo.circuits import eap as E

    model = tiny_model("llama", dtype=torch.float64)
    task = build_task("induction", model, n=3, seed=0)
    g, rows = graph_of(model), slice(0, 3)

    def metric(logits, rows):  # a logit difference: two columns a prompt
        c, w = task.correct[rows, :1], (task.correct[rows, :1] + 1) % logits.shape[-1]
        return (logits.gather(1, c) - logits.gather(1, w))[:, 0]

    seen = []
    real = E._SparseReadout.backward
    monkeypatch.setattr(E._SparseReadout, "backward", staticmethod(lambda ctx, gr: seen.append(1) or real(ctx, gr)))
    assert E._unembedding_matrix(model) is not None
    sparse = E._grad_pass(model, g, task.clean, metric, rows, torch.float64)
    assert seen
    monkeypatch.setitem(E._UNEMBED_LINEAR, model, False)  # as a model whose unembedding is not linear
    dense = E._grad_pass(model, g, task.clean, metric, rows, torch.float64)
    assert len(seen) == 1
    for a, b in [*zip(sparse.heads, dense.heads), *zip(sparse.mlp, dense.mlp), (sparse.final, dense.final)]:
        assert a.abs().max() > 0 and torch.allclose(a, b, rtol=1e-10, atol=1e-13)
    _, want = sparse.rows(slice(0, g.n_receivers)), dense.rows(slice(0, g.n_receivers))
    assert torch.allclose(_, want, rtol=1e-10, atol=1e-13)


def test_the_projections_are_read_in_place_and_the_vjp_of_their_parts_is_the_whole(case):
    """``qkv_weights(copy=False)`` gives views of the model's own weights (no copy), ``copy=True`` copies; the norm's
    vector-Jacobian product of the q, k, v parts equals that of their concatenation."""
    from tlgeo.circuits import eap as E
    from tlgeo.circuits.graph import norm_module, qkv_weights

    _, model, task, _ = case
    views, copies = qkv_weights(model, 0, copy=False), qkv_weights(model, 0)
    storage = {p.untyped_storage().data_ptr() for p in model.parameters()}
    assert views["q"][0].untyped_storage().data_ptr() in storage
    assert copies["q"][0].untyped_storage().data_ptr() not in storage
    assert all(torch.equal(views[i][0], copies[i][0]) for i in "qkv")
    gen = torch.Generator().manual_seed(1)
    parts = [w for w, _ in views.values()]
    x = torch.randn(2, 4, model.cfg.d_model, generator=gen, dtype=torch.float64)
    gh = torch.randn(sum(w.shape[0] for w in parts), 2, 4, parts[0].shape[-1], generator=gen, dtype=torch.float64)
    norm = norm_module(model, "ln1", 0)
    got = E._norm_vjp(norm, x, gh, parts, torch.float64)
    want = E._norm_vjp(norm, x, gh, torch.cat(parts), torch.float64)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-14 * want.abs().max())
