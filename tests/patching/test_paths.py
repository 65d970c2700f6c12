"""Path patching: the batched, resumed sweep equals Wang et al.'s three steps done by hand with full forwards."""

import pytest
import torch

from tlgeo.patching.exact import exact_sweep, patch_hooks
from tlgeo.patching.paths import path_effects, path_runs, path_sweep
from tlgeo.patching.runs import task_runs
from tlgeo.patching.tasks import build_task


@pytest.fixture(scope="module", params=["llama", "gpt_neox"])
def setup(request):
    model = request.getfixturevalue(request.param)
    task = build_task("induction", model, n=3, seed=1)
    return model, task


def _kv(model, head):
    n_kv = getattr(model.cfg, "n_key_value_heads", None) or model.cfg.n_heads
    return head // (model.cfg.n_heads // n_kv)


def _by_hand(model, task, comp, sender, receiver, inp, direction="denoise", through_mlps=True):
    """Wang et al.'s steps with whole forwards and full caches, one path at a time."""
    clean, corrupted = task.clean, task.corrupted
    target_tokens, source_tokens = (corrupted, clean) if direction == "denoise" else (clean, corrupted)
    with torch.no_grad():
        _, source = model.run_with_cache(source_tokens)
        _, target = model.run_with_cache(target_tokens)
    s_layer, s_head = sender
    heads = None
    if s_head >= 0:
        heads = torch.zeros(task.n, model.cfg.n_heads)
        heads[:, s_head] = 1.0
    hooks = patch_hooks(model, [comp], s_layer, dict(source.items()), heads=heads)
    r_layer = model.cfg.n_layers if receiver is None else receiver[0]
    for l in range(s_layer + 1, r_layer):
        hooks.append((f"blocks.{l}.hook_attn_out", lambda x, hook, v=target[f"blocks.{l}.hook_attn_out"]: v))
    if not through_mlps:
        for l in range(s_layer + (1 if s_head < 0 else 0), r_layer):
            hooks.append((f"blocks.{l}.hook_mlp_out", lambda x, hook, v=target[f"blocks.{l}.hook_mlp_out"]: v))
    with torch.no_grad():
        store = {}
        name = (
            f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"
            if receiver is None
            else f"blocks.{r_layer}.attn.hook_{inp}"
        )
        hooks.append((name, lambda x, hook: store.__setitem__("x", x.clone())))
        model.run_with_hooks(target_tokens, fwd_hooks=hooks)
        if receiver is None:
            return task.score(model.unembed(model.ln_final(store["x"]))[:, -1])
        unit = receiver[1] if inp == "q" else _kv(model, receiver[1])

        def swap(x, hook):
            x = x.clone()
            x[:, :, unit] = store["x"][:, :, unit]
            return x

        logits = model.run_with_hooks(target_tokens, fwd_hooks=[(name, swap)])
    return task.score(logits[:, -1])


@pytest.mark.parametrize("direction", ["denoise", "noise"])
def test_the_sweep_equals_the_three_steps_by_hand(setup, direction):
    model, task = setup
    comps = ["head", "head_perp", "nonself"]
    runs = path_runs(model, task, comps, [0], [2], logits=True)
    senders, receivers = [(0, 0), (0, 1)], [(2, 0), (2, 3)]
    rows = path_sweep(
        model, runs, senders, receivers, components=comps, logits=True, direction=direction, max_rows=4
    )  # 4 rows: senders and receivers split over several forwards
    assert len(rows) == len(comps) * len(senders) * (len(receivers) * 3 + 1)
    for r in rows[::3]:
        receiver = None if r["receiver_input"] == "logits" else (r["receiver_layer"], r["receiver_head"])
        want = _by_hand(
            model, task, r["component"], (r["sender_layer"], r["sender_head"]), receiver, r["receiver_input"], direction
        )
        torch.testing.assert_close(torch.tensor(r["patched"]), want, rtol=1e-4, atol=1e-4)


def test_the_direct_path_freezes_the_mlps_and_an_mlp_sender_is_one_per_block(setup):
    model, task = setup
    runs = path_runs(model, task, ["head", "mlp"], [0], [1], through_mlps=False)
    for comp, sender in (("head", (0, 2)), ("mlp", (0, -1))):
        rows = path_sweep(model, runs, [sender], [(1, 1)], components=[comp], inputs=["k"], through_mlps=False)
        assert len(rows) == 1 and rows[0]["sender_head"] == sender[1]
        want = _by_hand(model, task, comp, sender, (1, 1), "k", through_mlps=False)
        torch.testing.assert_close(torch.tensor(rows[0]["patched"]), want, rtol=1e-4, atol=1e-4)


def test_a_sender_in_the_last_block_into_the_logits_is_its_exact_patch(setup):
    model, task = setup
    last = model.cfg.n_layers - 1
    runs = path_runs(model, task, ["head"], [last], logits=True)
    rows = path_sweep(model, runs, [(last, h) for h in range(model.cfg.n_heads)], logits=True)
    exact = exact_sweep(model, task_runs(model, task, ["head"], [last]), ["head"], layers=[last])
    for r, e in zip(rows, exact):
        assert (r["sender_head"], r["receiver_input"]) == (e["head"], "logits")
        torch.testing.assert_close(torch.tensor(r["patched"]), torch.tensor(e["patched"]), rtol=1e-4, atol=1e-4)


def test_a_path_into_the_logits_alone_from_an_early_block(setup):
    model, task = setup
    runs = path_runs(model, task, ["head"], [0], logits=True)  # no receiver head: only block 0 is cached
    rows = path_sweep(model, runs, [(0, 1)], logits=True)
    assert [r["receiver_input"] for r in rows] == ["logits"]
    want = _by_hand(model, task, "head", (0, 1), None, "logits")
    torch.testing.assert_close(torch.tensor(rows[0]["patched"]), want, rtol=1e-4, atol=1e-4)


def test_grouped_query_receivers_share_their_key_and_value_head(llama):
    task = build_task("induction", llama, n=3, seed=1)
    assert llama.cfg.n_key_value_heads < llama.cfg.n_heads  # the tiny llama has GQA
    runs = path_runs(llama, task, ["head"], [0], [1])
    rows = path_sweep(llama, runs, [(0, 0)], [(1, h) for h in range(llama.cfg.n_heads)])
    k = {r["receiver_head"]: r for r in rows if r["receiver_input"] == "k"}
    q = {r["receiver_head"]: r for r in rows if r["receiver_input"] == "q"}
    group = [h for h in k if k[h]["kv_head"] == k[0]["kv_head"]]
    assert len(group) == llama.cfg.n_heads // llama.cfg.n_key_value_heads > 1
    assert all(k[h]["patched"] == k[0]["patched"] for h in group)
    assert q[group[0]]["patched"] != q[group[1]]["patched"]  # queries are each head's own


def test_a_no_op_sender_changes_nothing_and_effects_have_q_over_the_sweep(setup):
    model, task = setup
    runs = path_runs(model, task, ["head"], [0], [1])
    runs.clean = runs.corrupted  # source = target: every patch is the identity
    rows = path_sweep(model, runs, [(0, 0), (0, 1)], [(1, 0)])
    for r in rows:
        torch.testing.assert_close(torch.tensor(r["patched"]), runs.corrupted.metric, rtol=1e-5, atol=1e-5)
    runs = path_runs(model, task, ["head"], [0], [1])
    df = path_effects(path_sweep(model, runs, [(0, 0), (0, 1)], [(1, 0)]), runs)
    assert len(df) == 6 and df["q"].between(0, 1).all() and (df["q"] >= df["p"] - 1e-12).all()


def test_bad_paths_are_refused_with_what_is_wrong(setup):
    model, task = setup
    runs = path_runs(model, task, ["head"], [0], [1])
    with pytest.raises(ValueError, match="unknown receiver input"):
        path_sweep(model, runs, [(0, 0)], [(1, 0)], inputs=["o"])
    with pytest.raises(IndexError, match="out of range"):
        path_sweep(model, runs, [(0, model.cfg.n_heads)], [(1, 0)])
    with pytest.raises(ValueError, match="did not cache"):
        path_sweep(model, runs, [(0, 0)], [(2, 0)])
    with pytest.raises(ValueError, match="at least one sender and one receiver"):
        path_sweep(model, runs, [(0, 0)], [])
