"""Perplexity of a TransformerBridge on long text, with any forward hooks active.

Rolling (strided) evaluation as in Hugging Face's perplexity guide and
lm-eval's rolling loglikelihood: the text is tokenized once, without BOS, and cut
into windows of at most ``context`` positions; every token is scored exactly once
(the first one only when a BOS token is prepended to each window).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Callable, Iterable, Sequence

import torch
import torch.nn.functional as F
from jaxtyping import Int
from torch import Tensor

from ..errors import InputError
from ..hooks.resume import last_block_output, readout, readout_ok
from ..models import input_device

__all__ = [
    "PerplexityResult",
    "token_windows",
    "tokenize_text",
    "scored_tokens",
    "corpus_batches",
    "perplexity",
    "read_out_losses",
]

Hook = tuple[str | Callable, Callable]


@dataclass
class PerplexityResult:
    """Perplexity summary; ``token_losses`` is ``[n_tokens]`` float32 NLL (nats) in text order."""

    ppl: float
    nll: float
    n_tokens: int
    n_windows: int
    word_ppl: float | None
    token_losses: torch.Tensor = field(repr=False)

    def to_dict(self) -> dict:
        """All fields except ``token_losses``."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "token_losses"}


def token_windows(
    tokens: torch.Tensor,
    context: int,
    stride: int | None = None,
    *,
    bos_token_id: int | None = None,
) -> list[tuple[torch.Tensor, int]]:
    """Cut a token stream into evaluation windows; pure function, no model.

    ``tokens``: ``[n]`` text tokens (no BOS). Returns ``(input_ids, target_start)``
    pairs: ``input_ids`` is ``[t]`` with ``t <= context`` (``bos_token_id`` first when
    given), and positions ``target_start..t-1`` of it are scored, each predicted from
    the logits one position earlier (``target_start >= 1``).

    Each window after the first re-reads ``context - stride`` positions of left
    context (the BOS counts as one) and scores ``stride`` new tokens; ``stride``
    defaults to ``context`` (disjoint windows). Without BOS a token needs one token of
    context, so ``stride`` is capped at ``context - 1`` (windows overlap by one token).
    Every token is scored exactly once, except token 0 when there is no BOS.
    """
    if tokens.ndim != 1:
        raise InputError(f"tokens must be 1-D, got shape {tuple(tokens.shape)}")
    if context < 2:
        raise InputError(f"context must be >= 2, got {context}")
    stride = context if stride is None else stride
    if stride < 1:
        raise InputError(f"stride must be >= 1, got {stride}")
    has_bos = bos_token_id is not None
    width = context - int(has_bos)  # text tokens per window
    step = min(stride, width if has_bos else width - 1)  # new tokens scored per window
    n = tokens.numel()
    bos = torch.tensor([bos_token_id], dtype=tokens.dtype) if has_bos else None

    windows: list[tuple[torch.Tensor, int]] = []
    scored_until = 0 if has_bos else 1  # next token (stream index) to score
    begin = 0
    while scored_until < n:
        end = min(begin + width, n)
        ids = tokens[begin:end]
        if has_bos:
            ids = torch.cat([bos, ids])
        windows.append((ids, scored_until - begin + int(has_bos)))
        scored_until = end
        begin += step
    return windows


def tokenize_text(model, text: str, max_tokens: int | None = None) -> torch.Tensor:
    """``[n]`` token ids of ``text`` without BOS/EOS, never truncated to ``n_ctx``.

    With ``max_tokens`` only a growing prefix of the text is tokenized (a large
    corpus is not tokenized whole to keep its first few thousand tokens); the
    last token of a cut prefix is dropped, since the cut may split it.
    """

    def encode(t: str) -> list[int]:
        return model.tokenizer(t, add_special_tokens=False, verbose=False)["input_ids"]

    if max_tokens is None:
        return torch.tensor(encode(text), dtype=torch.long)
    n_chars = 8 * max_tokens + 64
    while True:
        ids = encode(text[:n_chars])
        if n_chars >= len(text):
            break
        if len(ids) > max_tokens:
            ids = ids[:-1]
            break
        n_chars *= 2
    return torch.tensor(ids[:max_tokens], dtype=torch.long)


def scored_tokens(
    model, text: str, max_tokens: int | None = None, prepend_bos: bool | None = None
) -> tuple[torch.Tensor, int | None]:
    """What :func:`perplexity` reads of ``text``: its ``[n]`` text tokens (the first ``max_tokens``) and the
    BOS id it prepends to each window (``None``: none; ``prepend_bos`` defaults to
    ``model.cfg.default_prepend_bos``)."""
    tokens = tokenize_text(model, text, max_tokens).reshape(-1).long().cpu()
    return (tokens[:max_tokens] if max_tokens is not None else tokens), _bos_id(model, prepend_bos)


def _bos_id(model, prepend_bos: bool | None) -> int | None:
    """The BOS id prepended to each window (``None``: none; default ``model.cfg.default_prepend_bos``)."""
    if prepend_bos is None:
        prepend_bos = bool(getattr(model.cfg, "default_prepend_bos", True))
    return getattr(model.tokenizer, "bos_token_id", None) if prepend_bos else None


def corpus_batches(model, text: str, seq_len: int = 256, max_tokens: int | None = None) -> Int[Tensor, "n seq"]:
    """Cut ``text`` into disjoint windows of ``seq_len`` tokens (BOS first when the model
    prepends one); the ragged tail is dropped. ``[n_windows, seq_len]``."""
    if seq_len > model.cfg.n_ctx:
        raise InputError(f"seq_len {seq_len} exceeds the model's context n_ctx={model.cfg.n_ctx}")
    if not text or not text.strip():
        raise InputError("empty corpus: no text to cut into windows")
    ids = tokenize_text(model, text, max_tokens)
    bos = model.tokenizer.bos_token_id if model.cfg.default_prepend_bos else None
    windows = [w for w, _ in token_windows(ids, seq_len, bos_token_id=bos) if w.numel() == seq_len]
    if not windows:
        raise InputError(f"corpus too short: fewer than {seq_len} tokens ({ids.numel()})")
    return torch.stack(windows)


def _batches(windows: Sequence[tuple[torch.Tensor, int]], batch_size: int) -> Iterable[list[int]]:
    """Indices of consecutive equal-length windows, at most ``batch_size`` per batch."""
    batch: list[int] = []
    for i, (ids, _) in enumerate(windows):
        if batch and (len(batch) == batch_size or windows[batch[0]][0].numel() != ids.numel()):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


def read_out_losses(model, final: Tensor, tokens: Int[Tensor, "b pos"]) -> Tensor:
    """``[b, pos - 1]`` next-token NLL (nats, float32) of the logits read out of the last block's output
    ``final [b, pos, d]`` (:func:`tlgeo.hooks.resume.readout`), one row at a time: one row's
    ``[pos, vocab]`` logits exist at once, not the batch's."""
    tokens = tokens.to(final.device)
    return torch.stack(
        [
            F.cross_entropy(readout(model, final[r, :-1]).float(), tokens[r, 1:], reduction="none")
            for r in range(tokens.shape[0])
        ]
    )


def _stream_tokens(model, text_or_tokens: str | torch.Tensor, max_tokens: int | None, prepend_bos: bool | None):
    """``([n] text tokens to score, BOS id or None)`` of a text or a token stream, cut to ``max_tokens``."""
    if isinstance(text_or_tokens, str):
        return scored_tokens(model, text_or_tokens, max_tokens, prepend_bos)
    tokens = torch.as_tensor(text_or_tokens).reshape(-1).long().cpu()
    tokens = tokens[:max_tokens] if max_tokens is not None else tokens
    return tokens, _bos_id(model, prepend_bos)


def _window_losses(
    model, windows: Sequence[tuple[torch.Tensor, int]], batch_size: int, hooks: list, progress: bool
) -> Tensor:
    """``[n]`` float32 NLL of every scored token of ``windows``, in stream order, ``batch_size`` windows a forward."""
    starts = torch.tensor([0] + [w[0].numel() - w[1] for w in windows]).cumsum(0)
    losses = torch.empty(int(starts[-1]), dtype=torch.float32)
    device = input_device(model)
    batches = list(_batches(windows, batch_size))
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, desc="perplexity", unit="batch")
    # hooks on the blocks only: the forward can stop at the last block and read each row out in turn (one row's
    # logits at a time, not the batch's [b, t, vocab]: 400 MB at 4 x 512 tokens of SmolLM2's vocabulary)
    by_row = all(isinstance(n, str) and n.startswith("blocks.") for n, _ in hooks) and hasattr(model, "blocks")
    with torch.inference_mode():
        for idx in batches:
            inp = torch.stack([windows[i][0] for i in idx]).to(device)  # [b, t]
            # [b, t-1]: loss of token j+1 given tokens <= j, a row at a time
            if by_row and readout_ok(model, inp):
                nll = read_out_losses(model, last_block_output(model, inp, hooks), inp).cpu()
            else:
                logits = model.run_with_hooks(inp, fwd_hooks=hooks) if hooks else model(inp)
                nll = torch.stack(
                    [F.cross_entropy(logits[r, :-1].float(), inp[r, 1:], reduction="none") for r in range(len(idx))]
                ).cpu()
                del logits
            for row, i in enumerate(idx):
                losses[starts[i] : starts[i + 1]] = nll[row, windows[i][1] - 1 :]
    return losses


def perplexity(
    model,
    text_or_tokens: str | torch.Tensor,
    *,
    context: int | None = None,
    stride: int | None = None,
    batch_size: int = 4,
    fwd_hooks: Iterable[Hook] = (),
    max_tokens: int | None = None,
    prepend_bos: bool | None = None,
    progress: bool = False,
) -> PerplexityResult:
    """Rolling perplexity of ``model`` on a text or a ``[n]`` token stream (no BOS).

    ``context`` defaults to ``min(model.cfg.n_ctx, 1024)`` positions per window; see
    :func:`token_windows` for ``stride``. A BOS is prepended to each window when
    ``prepend_bos`` (default ``model.cfg.default_prepend_bos``) and the tokenizer has a
    BOS id. ``fwd_hooks`` are ``(hook_name, fn)`` pairs active on every forward pass;
    ``max_tokens`` keeps only the first text tokens. ``word_ppl`` is
    ``exp(total NLL / whitespace words)`` and only set for text input.
    """
    n_ctx = model.cfg.n_ctx
    context = min(n_ctx, 1024) if context is None else context
    if context > n_ctx:
        raise InputError(f"context {context} exceeds the model's n_ctx {n_ctx}")
    if batch_size < 1:
        raise InputError(f"batch_size must be >= 1, got {batch_size}")

    is_text = isinstance(text_or_tokens, str)
    tokens, bos_id = _stream_tokens(model, text_or_tokens, max_tokens, prepend_bos)
    truncated = max_tokens is not None and tokens.numel() >= max_tokens
    if tokens.numel() == 0 or (is_text and not text_or_tokens.strip()):
        raise InputError("empty corpus: no tokens to score")
    windows = token_windows(tokens, context, stride, bos_token_id=bos_id)
    if not windows:
        raise InputError("empty corpus: a single token and no BOS leaves nothing to score")

    losses = _window_losses(model, windows, batch_size, list(fwd_hooks), progress)

    total = losses.double().sum().item()
    mean = total / losses.numel()
    word_ppl = None
    if is_text:
        scored_text = model.tokenizer.decode(tokens.tolist()) if truncated else text_or_tokens
        n_words = len(scored_text.split())
        word_ppl = math.exp(total / n_words) if n_words else None
    return PerplexityResult(
        ppl=math.exp(mean),
        nll=mean,
        n_tokens=losses.numel(),
        n_windows=len(windows),
        word_ppl=word_ppl,
        token_losses=losses,
    )
