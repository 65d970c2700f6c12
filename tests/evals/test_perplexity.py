"""Rolling perplexity: window arithmetic, brute-force agreement, hooks, errors."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tlgeo.data import load_text
from tlgeo.models import tiny_model
from tlgeo.evals.perplexity import PerplexityResult, perplexity, token_windows, tokenize_text

BOS = 7  # distinct from the stream tokens below (>= 1000)


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", seed=0)


@pytest.fixture(scope="module")
def text():
    return load_text("austen", max_chars=400)  # byte tokenizer: 400 tokens


# ---------------------------------------------------------------------------
# token_windows (pure)
# ---------------------------------------------------------------------------


def _check_windows(n: int, context: int, stride: int | None, bos: int | None) -> None:
    tokens = torch.arange(n) + 1000
    windows = token_windows(tokens, context, stride, bos_token_id=bos)
    has_bos = bos is not None
    # New tokens per window: stride, capped so one position of context remains (BOS or a token).
    step = min(context if stride is None else stride, context - 1)
    scored = []
    for k, (ids, start) in enumerate(windows):
        assert ids.ndim == 1 and ids.dtype == tokens.dtype
        assert 1 <= start < ids.numel() <= context
        text_ids = ids
        if has_bos:
            assert ids[0] == bos
            text_ids = ids[1:]
        pos = text_ids - 1000  # stream indices held by the window: contiguous
        assert torch.equal(pos, torch.arange(int(pos[0]), int(pos[0]) + pos.numel()))
        scored += (ids[start:] - 1000).tolist()
        if 0 < k < len(windows) - 1:  # full middle windows re-read context - stride positions
            assert ids.numel() == context
            assert start == context - step
    first = 0 if has_bos else 1
    assert scored == list(range(first, n)), "every token after the first is scored exactly once"


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(0, 400),
    context=st.integers(2, 70),
    stride=st.none() | st.integers(1, 90),
    bos=st.sampled_from([None, BOS]),
)
def test_token_windows_score_every_token_once(n, context, stride, bos):
    _check_windows(n, context, stride, bos)


@pytest.mark.parametrize("n", [1, 2, 9, 10, 11, 1000])
@pytest.mark.parametrize("context,stride", [(2, None), (5, None), (5, 1), (5, 3), (5, 5), (64, 17)])
@pytest.mark.parametrize("bos", [None, BOS])
def test_token_windows_grid(n, context, stride, bos):
    _check_windows(n, context, stride, bos)


def test_token_windows_examples():
    t = torch.arange(10)
    got = [(w.tolist(), s) for w, s in token_windows(t, 5, bos_token_id=99)]
    assert got == [([99, 0, 1, 2, 3], 1), ([99, 4, 5, 6, 7], 1), ([99, 8, 9], 1)]
    got = [(w.tolist(), s) for w, s in token_windows(t, 5, 3, bos_token_id=99)]
    assert got == [([99, 0, 1, 2, 3], 1), ([99, 3, 4, 5, 6], 2), ([99, 6, 7, 8, 9], 2)]
    # Without BOS, disjoint windows overlap by one token so no token goes unscored.
    got = [(w.tolist(), s) for w, s in token_windows(t, 5)]
    assert got == [([0, 1, 2, 3, 4], 1), ([4, 5, 6, 7, 8], 1), ([8, 9], 1)]
    assert token_windows(torch.arange(1), 5) == []


def test_token_windows_rejects_bad_arguments():
    with pytest.raises(ValueError):
        token_windows(torch.arange(10), 1)
    with pytest.raises(ValueError):
        token_windows(torch.arange(10), 5, 0)
    with pytest.raises(ValueError):
        token_windows(torch.arange(10).view(2, 5), 5)


# ---------------------------------------------------------------------------
# perplexity on a tiny model
# ---------------------------------------------------------------------------


def _brute_force(model, tokens: torch.Tensor, context: int, stride: int, bos: int | None) -> torch.Tensor:
    """HF perplexity-guide loop on the underlying HF model, one forward per window, float64."""
    hf = model.original_model
    width = context - (bos is not None)
    n, prev_end, out = tokens.numel(), 0 if bos is not None else 1, []
    for begin in range(0, n, stride):
        end = min(begin + width, n)
        ids = tokens[begin:end]
        n_new = end - prev_end
        if bos is not None:
            ids = torch.cat([torch.tensor([bos]), ids])
        with torch.no_grad():
            logp = torch.log_softmax(hf(ids[None]).logits[0].double(), dim=-1)
        for j in range(ids.numel() - n_new, ids.numel()):
            out.append(-logp[j - 1, ids[j]])
        prev_end = end
        if end == n:
            break
    return torch.stack(out)


@pytest.mark.parametrize(
    "context,stride,prepend_bos,batch_size",
    [(64, None, True, 4), (64, 24, True, 3), (64, None, False, 2), (50, 17, False, 1), (256, None, True, 4)],
)
def test_matches_brute_force(model, text, context, stride, prepend_bos, batch_size):
    tokens = tokenize_text(model, text)
    res = perplexity(model, text, context=context, stride=stride, prepend_bos=prepend_bos, batch_size=batch_size)
    bos = model.tokenizer.bos_token_id if prepend_bos else None
    # Documented semantics: without BOS, "disjoint" windows overlap by one token.
    hf_stride = stride if stride is not None else (context - 1)
    ref = _brute_force(model, tokens, context, hf_stride, bos)
    assert res.token_losses.dtype == torch.float32 and res.token_losses.shape == ref.shape
    assert res.n_tokens == tokens.numel() - (bos is None)
    torch.testing.assert_close(res.token_losses.double(), ref, atol=1e-5, rtol=0)
    assert res.nll == pytest.approx(ref.mean().item(), abs=1e-5)
    assert res.ppl == pytest.approx(math.exp(ref.mean().item()), rel=1e-5)
    assert res.n_windows == len(token_windows(tokens, context, stride, bos_token_id=bos))
    n_words = len(text.split())
    assert res.word_ppl == pytest.approx(math.exp(ref.sum().item() / n_words), rel=1e-4)


def test_disjoint_windows_equal_separate_chunks(model, text):
    """Disjoint windows with BOS = each chunk evaluated on its own in one long window."""
    tokens = tokenize_text(model, text)[:300]
    res = perplexity(model, tokens, context=64, batch_size=3)
    chunks = [perplexity(model, c, context=256).token_losses for c in tokens.split(63)]
    torch.testing.assert_close(res.token_losses, torch.cat(chunks), atol=1e-5, rtol=0)
    assert res.n_windows == len(chunks) == 5


def test_text_fitting_in_context_is_one_window(model):
    tokens = tokenize_text(model, load_text("mobydick", max_chars=200))
    one = perplexity(model, tokens, context=256)
    for stride in (None, 13, 255):
        other = perplexity(model, tokens, context=256, stride=stride)
        assert other.n_windows == 1
        torch.testing.assert_close(other.token_losses, one.token_losses, atol=1e-6, rtol=0)
    # Smaller disjoint windows lose context, so the numbers must differ.
    assert perplexity(model, tokens, context=32).ppl != pytest.approx(one.ppl, rel=1e-3)
    assert one.word_ppl is None


def test_hooks(model, text):
    base = perplexity(model, text, context=128)

    def zero(x, hook):
        return torch.zeros_like(x)

    def identity(x, hook):
        return x

    zeroed = perplexity(model, text, context=128, fwd_hooks=[("blocks.0.hook_attn_out", zero)])
    same = perplexity(model, text, context=128, fwd_hooks=[("blocks.0.hook_attn_out", identity)])
    assert abs(zeroed.nll - base.nll) > 1e-3
    torch.testing.assert_close(same.token_losses, base.token_losses, atol=1e-6, rtol=0)
    # Hooks are removed after the run.
    after = perplexity(model, text, context=128)
    torch.testing.assert_close(after.token_losses, base.token_losses, atol=0, rtol=0)


def test_hooked_blocks_read_out_a_row_at_a_time_with_the_same_losses(model, text, monkeypatch):
    """Hooks on the blocks only: the forward stops at the last block and each row goes through the unembedding
    alone (never the batch's [b, t, vocab] logits); the losses are the full forward's. A hook past the blocks
    (here the final norm's) gets the full forward, so that it runs."""
    from tlgeo.hooks import resume

    def half(x, hook):
        return 0.5 * x

    def scale(x, hook):
        return 10.0 * x

    assert resume.readout_ok(model, torch.tensor([[1, 2, 3]]))  # checked once per model, before the widths
    widths = []
    handle = model.unembed.register_forward_hook(lambda m, args, out: widths.append(tuple(out.shape[:-1])))
    try:
        fast = perplexity(model, text, context=64, batch_size=3, fwd_hooks=[("blocks.0.hook_resid_post", scale)])
        assert widths and all(w[-1] <= 63 and (len(w) == 1 or w[0] == 1) for w in widths), widths  # one row each
        monkeypatch.setitem(resume._READOUT_OK, model, False)  # readout unlike the model's: the full logits
        widths.clear()
        full = perplexity(model, text, context=64, batch_size=3, fwd_hooks=[("blocks.0.hook_resid_post", scale)])
        assert max(w[0] for w in widths) == 3  # a batch of three rows at once
    finally:
        handle.remove()
    torch.testing.assert_close(fast.token_losses, full.token_losses, atol=1e-5, rtol=1e-5)
    assert abs(fast.nll - perplexity(model, text, context=64, batch_size=3).nll) > 1e-4  # the hook ran
    widths.clear()
    handle = model.unembed.register_forward_hook(lambda m, args, out: widths.append(tuple(out.shape[:-1])))
    try:
        perplexity(model, text, context=64, batch_size=3, fwd_hooks=[("ln_final.hook_normalized", half)])
    finally:
        handle.remove()
    assert max(w[0] for w in widths) == 3  # a hook past the blocks: the whole forward


def test_max_tokens_progress_and_to_dict(model, text):
    res = perplexity(model, text, context=64, max_tokens=100, progress=True)
    assert isinstance(res, PerplexityResult)
    assert res.n_tokens == 100 and res.n_windows == 2  # BOS + 63 text tokens per window
    d = res.to_dict()
    assert set(d) == {"ppl", "nll", "n_tokens", "n_windows", "word_ppl"}
    assert math.isfinite(d["word_ppl"])
    short = perplexity(model, text[:100], context=64)  # byte tokenizer: same 100 tokens
    torch.testing.assert_close(short.token_losses, res.token_losses, atol=1e-6, rtol=0)


def test_default_context_and_gpt2(text):
    gpt2 = tiny_model("gpt2", seed=1)
    res = perplexity(gpt2, text)  # context min(n_ctx=256, 1024)
    assert res.n_windows == math.ceil(400 / 255)
    assert math.isfinite(res.ppl) and res.ppl > 1


@pytest.mark.parametrize("empty", ["", "   \n", torch.tensor([], dtype=torch.long)])
def test_empty_corpus(model, empty):
    with pytest.raises(ValueError, match="empty corpus"):
        perplexity(model, empty)


def test_single_token_without_bos_is_an_error(model):
    with pytest.raises(ValueError, match="empty corpus"):
        perplexity(model, torch.tensor([5]), prepend_bos=False)


def test_context_above_n_ctx(model):
    with pytest.raises(ValueError, match=r"300.*256"):
        perplexity(model, "hello world", context=300)


# ---------------------------------------------------------------------------
# The real model
# ---------------------------------------------------------------------------


@pytest.mark.real
def test_smollm2_wikitext2_perplexity(smollm2):
    res = perplexity(smollm2, load_text("wikitext2", max_chars=20_000), context=512, max_tokens=1024, batch_size=4)
    print(res.to_dict())
    assert res.n_tokens == 1024 and res.n_windows == 3  # 512-token windows: BOS + 511 new tokens each
    assert math.isfinite(res.ppl) and 8 < res.ppl < 60
    assert res.word_ppl is not None and res.ppl < res.word_ppl < 200
