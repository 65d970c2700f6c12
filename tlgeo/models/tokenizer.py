"""Tokenizer surgery: Gemma's GGUF tokenizer rebuilt as the BPE model it is, and the byte-level
tokenizer of the tiny test models (no hub)."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["gemma_unigram_to_bpe", "byte_tokenizer"]


def gemma_unigram_to_bpe(tokenizer_json: Path) -> None:
    """Rebuild a GGUF-converted Gemma tokenizer as the BPE model it is.

    transformers' GGUF reader turns Gemma's SentencePiece vocabulary into a
    Unigram model, but the GGUF scores are BPE merge priorities (single
    characters score 0, longer pieces less), so Unigram's Viterbi splits every
    word into characters ("The capital" -> T h e ...). The merges are recovered
    from the scores with transformers' own ``generate_merges``; normaliser,
    decoder and special tokens are kept.
    """
    from transformers.convert_slow_tokenizer import generate_merges

    tj = json.loads(tokenizer_json.read_text())
    model = tj["model"]
    if model["type"] != "Unigram":
        return
    pieces = [p for p, _ in model["vocab"]]
    vocab = {p: i for i, p in enumerate(pieces)}
    specials = {a["content"] for a in tj.get("added_tokens", [])}
    merges = generate_merges(vocab, dict(model["vocab"]), skip_tokens=specials)
    unk = model.get("unk_id")
    tj["model"] = {
        "type": "BPE",
        "dropout": None,
        "unk_token": pieces[unk] if unk is not None else None,
        "continuing_subword_prefix": None,
        "end_of_word_suffix": None,
        "fuse_unk": True,
        "byte_fallback": bool(model.get("byte_fallback", True)),
        "ignore_merges": False,
        "vocab": vocab,
        "merges": [list(m) for m in merges],
    }
    tokenizer_json.write_text(json.dumps(tj, ensure_ascii=False))


def byte_tokenizer():
    """A byte-level BPE tokenizer with no merges: 256 byte tokens + BOS/EOS, no hub."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    vocab["<|bos|>"] = len(vocab)
    vocab["<|eos|>"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|eos|>", pad_token="<|eos|>")
