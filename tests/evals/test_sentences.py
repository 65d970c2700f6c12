"""Sentences as padded batches and their NLL: padding never changes a row's score."""

import pytest
import torch

from tlgeo.evals.sentences import sentence_batches, sentence_nll


def test_batches_pad_right_and_drop_one_token_sentences(llama, sentences):
    batches = sentence_batches(llama, sentences, max_tokens=12, batch_size=4)
    lengths = torch.cat([l for _, l in batches])
    assert len(lengths) == 6 and lengths.max() <= 12 and lengths.min() >= 2  # "x" is BOS + x: kept
    toks, l = batches[0]
    with torch.inference_mode():
        batched = sentence_nll(llama(toks), toks, l)
        alone = torch.stack(
            [
                sentence_nll(llama(toks[i : i + 1, : l[i]]), toks[i : i + 1, : l[i]], l[i : i + 1])[0]
                for i in range(len(l))
            ]
        )
    torch.testing.assert_close(batched, alone, atol=1e-5, rtol=1e-5)  # right padding changes nothing
    with pytest.raises(ValueError, match="no sentences"):
        sentence_batches(llama, [])


def test_sum_is_the_sentence_log_probability(llama, sentences):
    ((toks, l),) = sentence_batches(llama, sentences[:2], batch_size=2)
    with torch.inference_mode():
        logits = llama(toks)
        total = sentence_nll(logits, toks, l, "sum")
        mean = sentence_nll(logits, toks, l, "mean")
    torch.testing.assert_close(total, mean * (l - 1).float())
    lp = torch.log_softmax(logits[0, : l[0] - 1].float(), -1).gather(-1, toks[0, 1 : l[0], None]).sum()
    assert total[0].item() == pytest.approx(-lp.item(), rel=1e-5)
    with pytest.raises(ValueError, match="unknown reduce"):
        sentence_nll(logits, toks, l, "max")


def test_pairs_must_not_lose_a_sentence(llama):
    with pytest.raises(ValueError, match="fewer than 2 tokens"):
        sentence_batches(llama, ["fine sentence", ""], keep_all=True)
