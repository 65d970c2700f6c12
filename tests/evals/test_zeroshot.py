from pathlib import Path

import pandas as pd
import pytest
import torch

from tlgeo.evals import zeroshot as zs
from tlgeo.hooks.edits import Edit, edit
from tlgeo.evals.zeroshot import (
    paired_accuracy_change,
    MCItem,
    UnknownTaskError,
    encode_pair,
    evaluate_zeroshot,
    load_task,
    score_items,
    score_requests,
)

DATA = Path(__file__).parents[1] / "data" / "zeroshot"


def enc(model, s):
    return model.tokenizer(s, add_special_tokens=False)["input_ids"]


def brute_logprob(model, ctx: str, cont: str, hooks=()) -> float:
    """One unbatched forward of [BOS] + ctx + cont; sum of the continuation's log-probs.

    BOS as the model's ``default_prepend_bos`` says (False for tiny:gpt_neox); the tiny
    models' byte tokenizer makes the joint tokens the concatenation."""
    c, x = enc(model, ctx), enc(model, cont)
    bos = [model.tokenizer.bos_token_id] if model.cfg.default_prepend_bos else []
    ids = torch.tensor([bos + c + x])
    with torch.no_grad():
        logits = model.run_with_hooks(ids, fwd_hooks=list(hooks)) if hooks else model(ids)
    lp = torch.log_softmax(logits[0].double(), -1)
    n = ids.shape[1]
    return sum(lp[n - len(x) - 1 + k, x[k]].item() for k in range(len(x)))


def test_loaders_templates_and_limit():
    piqa = load_task("piqa", DATA)
    assert [it.gold for it in piqa] == [0, 0, 1]
    assert piqa[0].contexts == ("Question: How do I dry wet shoes?\nAnswer:",) * 2
    assert piqa[0].continuations == (" Stuff them with newspaper.", " Put them in the freezer.")
    arc = load_task("arc_easy", DATA)
    assert arc[0].contexts[0] == "Question: What gives Earth light during the day?\nAnswer:"
    assert arc[1].n_choices == 3
    assert load_task("openbookqa", DATA)[0].contexts[0] == "Predators eat"
    assert load_task("boolq", DATA)[0].continuations == (" no", " yes")
    w = load_task("winogrande", DATA)[0]
    assert w.contexts[1].endswith("so Maria") and w.continuations == (" always got the easier cases.",) * 2
    assert load_task("piqa", DATA, limit=2) == piqa[:2]  # the first N, in file order


def test_encode_pair_moves_space_and_locates_boundary(llama):
    tok = llama.tokenizer
    c, x = encode_pair(tok, "Answer: ", "yes", prefix_token_id=256)
    assert c == [256] + enc(llama, "Answer:") and x == enc(llama, " yes")
    c, x = encode_pair(tok, "", "hi", prefix_token_id=256)
    assert c == [256] and x == enc(llama, "hi")
    c, x = encode_pair(tok, "", "hi")  # no BOS: the first token becomes the context
    assert c == enc(llama, "h") and x == enc(llama, "i")
    with pytest.raises(ValueError, match="empty continuation"):
        encode_pair(tok, "abc", "", prefix_token_id=256)


def test_encode_pair_bpe_boundary():
    """With a merging tokenizer the scored tokens are the joint tokenization's tail."""

    class Merging:  # "ab" merges into one token when adjacent
        def __call__(self, s, **kw):
            out, i = [], 0
            while i < len(s):
                if s[i : i + 2] == "ab":
                    out.append(1000)
                    i += 2
                else:
                    out.append(ord(s[i]))
                    i += 1
            return {"input_ids": out}

    c, x = encode_pair(Merging(), "xa", "bc", prefix_token_id=7)
    assert c == [7, ord("x")] and x == [1000, ord("c")]  # the straddling token is scored


def test_scores_equal_brute_force(tiny):
    items = load_task("arc_easy", DATA) + load_task("winogrande", DATA)
    df = score_items(tiny, items, batch_size=3)
    for it, lps in zip(items, df["logprobs"]):
        want = [brute_logprob(tiny, c, x) for c, x in zip(it.contexts, it.continuations)]
        assert lps == pytest.approx(want, abs=2e-4)
    assert list(df["n_tokens"][0]) == [len(enc(tiny, " " + c)) for c in ["the sun", "the moon", "a rock", "a tree"]]
    pred = [int(torch.tensor(lp).argmax()) for lp in df["logprobs"]]
    assert list(df["pred"]) == pred and list(df["correct"]) == [p == it.gold for p, it in zip(pred, items)]


def test_only_the_continuations_go_through_the_unembedding(llama, monkeypatch):
    from tlgeo.hooks import resume

    items = load_task("arc_easy", DATA)
    assert resume.readout_ok(llama, torch.tensor([[256, 1, 2]]))
    widths = []
    handle = llama.unembed.register_forward_hook(lambda m, args, out: widths.append(args[0].shape[-2]))
    try:
        scored = score_items(llama, items, batch_size=3)
        fast = scored["logprobs"].tolist()
        n_requests = sum(len(it.continuations) for it in items)
        # every continuation position once, a batch's in one call (3 inputs a batch): not the contexts' positions
        assert sum(widths) == sum(sum(n) for n in scored["n_tokens"]) and len(widths) == -(-n_requests // 3)
        longest = max(len(enc(llama, " " + c)) for it in items for c in it.continuations)
        widths.clear()
        monkeypatch.setitem(resume._READOUT_OK, llama, False)  # a model whose readout differs: full logits
        full = score_items(llama, items, batch_size=3)["logprobs"].tolist()
        assert max(widths) > longest
    finally:
        handle.remove()
    assert [v for r in fast for v in r] == pytest.approx([v for r in full for v in r], abs=1e-5)


def test_winogrande_scores_only_the_continuation(llama):
    it = load_task("winogrande", DATA)[0]
    reqs = [encode_pair(llama.tokenizer, c, x, prefix_token_id=256) for c, x in zip(it.contexts, it.continuations)]
    assert reqs[0][1] == reqs[1][1] == enc(llama, " always got the easier cases.")
    assert reqs[0][0] != reqs[1][0]
    df = score_items(llama, [it])
    cont_only = [brute_logprob(llama, c, it.continuations[0]) for c in it.contexts]
    whole = [brute_logprob(llama, "", c + it.continuations[0]) for c in it.contexts]
    assert df["logprobs"][0] == pytest.approx(cont_only, abs=2e-4)
    assert abs(whole[0] - cont_only[0]) > 1.0  # context tokens are not in the score


def test_acc_norm_divides_by_characters(llama, monkeypatch):
    # choice 0: " a" (2 chars) logprob -2; choice 1: " longer text" (12 chars), logprob -3
    item = MCItem.multiple_choice("Q:", ["a", "longer text"], gold=1)

    def fake(model, reqs, **kw):
        k = len(reqs) // 2
        return zs.Scores(
            torch.tensor([-2.0, -3.0] * k, dtype=torch.float64),
            torch.zeros(2 * k, dtype=torch.bool),
            torch.tensor([1, 3] * k),
            torch.zeros(2 * k, dtype=torch.bool),
        )

    monkeypatch.setattr(zs, "score_requests", fake)
    row = score_items(llama, [item]).iloc[0]
    assert row["lengths"] == [2, 12]
    assert row["pred"] == 0 and not row["correct"]  # -2 > -3
    assert row["pred_norm"] == 1 and row["correct_norm"]  # -3/12 > -2/2
    s = zs.summarize_items(score_items(llama, [item, item]))
    assert (s["acc"], s["acc_norm"]) == (0.0, 1.0)


def test_hooks_change_scores_noop_does_not(llama):
    items = load_task("openbookqa", DATA)
    base = score_items(llama, items)["logprobs"].tolist()
    noop = score_items(llama, items, fwd_hooks=Edit("value_excl_self").hooks(llama))["logprobs"].tolist()
    assert noop == base  # bit for bit
    hooks = Edit("attn", s_par=0.0).hooks(llama)
    edited = score_items(llama, items, fwd_hooks=hooks)["logprobs"].tolist()
    assert max(abs(a - b) for r, s in zip(edited, base) for a, b in zip(r, s)) > 1e-3
    with edit(llama, "attn", s_par=0.0):
        assert score_items(llama, items)["logprobs"].tolist() == edited
    it = items[0]
    assert edited[0][2] == pytest.approx(brute_logprob(llama, it.contexts[2], it.continuations[2], hooks), abs=2e-4)


def test_identical_inputs_share_a_forward(llama):
    """One-token continuations after one context (BoolQ's " no"/" yes" in BPE): one
    forward row per item; the byte tokenizer needs one-character continuations."""
    items = [MCItem.multiple_choice(q, ["y", "n"], gold=0, delimiter="") for q in ("Is it? A:", "Or not? A:")]
    rows = []
    hook = ("hook_embed", lambda x, hook: rows.append(x.shape[0]))
    df = score_items(llama, items, batch_size=8, fwd_hooks=[hook])
    assert sum(rows) == len(items)
    assert df["logprobs"][1] == pytest.approx([brute_logprob(llama, "Or not? A:", c) for c in "yn"], abs=2e-4)


def test_truncation_from_the_left_warns(llama):
    ctx, cont = "The quick brown fox jumps over", " the lazy dog"
    reqs = [encode_pair(llama.tokenizer, ctx, cont, prefix_token_id=256)]
    s = score_requests(llama, reqs, max_length=20)
    ids = (reqs[0][0] + reqs[0][1])[:-1][-20:]
    with torch.no_grad():
        lp = torch.log_softmax(llama(torch.tensor([ids]))[0].double(), -1)
    x = reqs[0][1]
    want = sum(lp[20 - len(x) + k, x[k]].item() for k in range(len(x)))
    assert bool(s.truncated[0]) and s.logprob[0].item() == pytest.approx(want, abs=2e-4)
    with pytest.warns(UserWarning, match=r"boolq: 6 of 6 requests .* max_length 16"):
        out = evaluate_zeroshot(llama, "boolq", data_dir=DATA, max_length=16)
    assert out["n_truncated"][0] == 6
    with pytest.raises(ValueError, match="exceeds max_length"):
        score_requests(llama, reqs, max_length=5)
    with pytest.raises(ValueError, match="n_ctx"):
        score_requests(llama, reqs, max_length=10_000)


def test_evaluate_summary_items_and_resume(llama, tmp_path, monkeypatch):
    log = tmp_path / "zs.jsonl"
    out, items = evaluate_zeroshot(
        llama, ("piqa", "winogrande"), data_dir=DATA, limit=2, log_path=log, tag="base", return_items=True
    )
    assert list(out["task"]) == ["piqa", "winogrande"] and list(out["n"]) == [2, 2]
    for task, g in items.groupby("task"):
        acc = g["correct"].mean()
        row = out.set_index("task").loc[task]
        assert row["acc"] == acc and row["acc_norm"] == g["correct_norm"].mean()
        assert row["stderr"] == pytest.approx((acc * (1 - acc) / (len(g) - 1)) ** 0.5)
    # winogrande: equal lengths, so acc_norm == acc
    w = items[items.task == "winogrande"]
    assert (w["pred"] == w["pred_norm"]).all()

    def boom(*a, **k):
        raise AssertionError("recomputed a logged task")

    monkeypatch.setattr(zs, "score_items", boom)
    again, items2 = evaluate_zeroshot(
        llama, ("piqa", "winogrande"), data_dir=DATA, limit=2, log_path=log, tag="base", return_items=True
    )
    pd.testing.assert_frame_equal(again, out)
    pd.testing.assert_frame_equal(items2, items)
    with pytest.raises(AssertionError, match="recomputed"):  # another tag is another run
        evaluate_zeroshot(llama, "piqa", data_dir=DATA, limit=2, log_path=log, tag="edited")


def _items(correct, correct_norm=None, task="piqa"):
    n = len(correct)
    return pd.DataFrame(
        {
            "task": task,
            "item": range(n),
            "correct": correct,
            "correct_norm": correct if correct_norm is None else correct_norm,
        }
    )


def test_paired_accuracy_change():
    base = pd.concat([_items([False] * 10), _items([True] * 10, task="arc_easy")], ignore_index=True)
    flips = [True, True, True] + [False] * 7
    edited = pd.concat([_items(flips, [False] * 10), _items([True] * 10, task="arc_easy")], ignore_index=True)
    df = paired_accuracy_change(edited.sample(frac=1, random_state=0), base, n_perm=500)
    acc, norm = df.set_index("metric").loc["acc"], df.set_index("metric").loc["acc_norm"]
    assert acc["delta"] == pytest.approx(100 * 3 / 20) and acc["n"] == 20  # pooled over both tasks
    assert acc["ci_low"] <= acc["delta"] <= acc["ci_high"] and acc["ci_low"] >= 0
    assert norm["delta"] == 0 and norm["p"] == 1.0
    with pytest.raises(ValueError, match="same"):
        paired_accuracy_change(edited.iloc[1:], base)


def test_errors(llama, tmp_path):
    with pytest.raises(UnknownTaskError, match=r"unknown zero-shot task 'hellaswag'.*known tasks: \['arc_challenge'"):
        load_task("hellaswag", DATA)
    with pytest.raises(UnknownTaskError, match="known tasks"):
        evaluate_zeroshot(llama, ("piqa", "rte"), data_dir=DATA)
    with pytest.raises(ValueError, match="no tasks"):
        evaluate_zeroshot(llama, (), data_dir=DATA)
    with pytest.raises(FileNotFoundError, match=r"task 'boolq': missing file.*known tasks"):
        load_task("boolq", tmp_path)
    (tmp_path / "piqa").mkdir()
    (tmp_path / "piqa" / "valid.jsonl").write_text('{"goal": "g", "sol1": "a", "sol2": "b"}\n')
    with pytest.raises(FileNotFoundError, match="valid-labels.lst"):
        load_task("piqa", tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_task("piqa", tmp_path / "nope")
    with pytest.raises(ValueError, match="limit"):
        load_task("piqa", DATA, limit=0)
    with pytest.raises(ValueError, match="batch_size"):
        score_requests(llama, [([256], [1])], batch_size=0)
    with pytest.raises(ValueError, match="no items"):
        score_items(llama, [])
    with pytest.raises(ValueError, match="gold"):
        MCItem(("a", "b"), (" x", " y"), gold=2)


@pytest.mark.real
def test_smollm2_real_tasks(smollm2):
    """Real BPE tokenizer and data: scored tokens decode to the continuation; batched = unbatched."""
    items = load_task("arc_easy", limit=2)
    tok = smollm2.tokenizer
    reqs = [
        encode_pair(tok, c, x, prefix_token_id=tok.bos_token_id)
        for c, x in zip(items[0].contexts, items[0].continuations)
    ]
    assert [tok.decode(r[1]) for r in reqs] == list(items[0].continuations)
    assert reqs[0][0][0] == tok.bos_token_id and tok.decode(reqs[0][0][1:]) == items[0].contexts[0]
    df = score_items(smollm2, items, batch_size=8)
    single = score_requests(smollm2, reqs[:1], batch_size=1).logprob[0].item()
    assert df["logprobs"][0][0] == pytest.approx(single, abs=1e-3)
    assert all(-200 < v < 0 for lps in df["logprobs"] for v in lps) and df["n_truncated"].sum() == 0
