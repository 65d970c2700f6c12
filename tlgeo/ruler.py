"""RULER-style synthetic long-context tasks, generated offline, and their evaluation.

RULER ("RULER: What's the Real Context Size of Your Long-Context Language
Models?", Hsieh et al. 2024) is not available offline; this module rebuilds its
synthetic task families in spirit, with its templates:

| task               | what is hidden                                   | answer (all must be returned) | metric |
|--------------------|--------------------------------------------------|--------------------------------|--------|
| ``niah_single``    | one key -> one 7-digit value                      | the value                      | all    |
| ``niah_multikey``  | 4 keys, one queried (3 distractors)               | the queried key's value        | all    |
| ``niah_multivalue``| one key with 4 values                             | the 4 values                   | all    |
| ``niah_multiquery``| 4 keys, all queried                               | the 4 values                   | all    |
| ``vt``             | a chain ``VAR A = 12345``, ``VAR B = VAR A``, ...   | every variable of the chain    | all    |
| ``cwe``            | a numbered word list, 10 words repeated often     | the 10 common words            | all    |
| ``fwe``            | coded words drawn with a Zipf law (alpha 2)       | the 3 most frequent (rank 1 is '....') | all |
| ``qa_boolq``       | a BoolQ passage among other BoolQ passages        | yes / no                       | first word |

Haystacks are random contiguous spans of the offline corpora
(``haystack="corpora"``: Austen, Moby Dick or the Bible, one per sample; or a
corpus name) or RULER's noise filler (``haystack="synthetic"``: "The grass is
green. The sky is blue. ..."). Lengths are in tokens of the model's tokenizer,
BOS included; the haystack is cut to hit the target (exactly for the needle
tasks and ``vt``, within one list entry for ``cwe``/``fwe``), never above it.
Needles go to sentence boundaries at the requested depth (fraction of the
haystack before the needle). Everything is seeded and deterministic.

Scoring follows RULER: ``string_match_all`` (fraction of the references found
in the output, averaged over samples, in percent) and ``string_match_part``
(any reference found). ``vt`` starts with a one-shot example, as RULER's
(``one_shot=False`` leaves it out). RULER's QA tasks use SQuAD/HotpotQA, which
are not available offline; ``qa_boolq`` keeps their layout (the gold passage
among distractor documents, the instruction before and after) with BoolQ's
passages and yes/no questions, scored by the first word of the output
(``first_word``; chance is 50%). Its length is hit within a few tokens (the
last document is cut at a word). Instruction-tuned models such as
SmolLM2-Instruct often end their turn at once on this raw (non-chat) prompt;
an empty answer counts as wrong. ``template="chat"`` puts every task's question
in the tokenizer's chat template and opens the assistant turn with the answer
prefix, as RULER does for instruction-tuned models.

Generation is greedy with the bridge's own ``generate`` and its KV cache, with
the forward hooks active. With transformers 5.17 (installed here) the cached
and uncached greedy outputs are identical on SmolLM2, edited or not (value-space
edits see ``q < k`` queries during cached decoding and handle it; checked by
:func:`greedy_generate` in the tests); transformers 5.24 was reported to break
the bridge's cached ``generate``, so ``use_kv_cache=False`` is kept as a switch.
"""

from __future__ import annotations

import functools
import os
import re
import string
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from .results import ResultLog

__all__ = [
    "Sample",
    "TASKS",
    "TASK_NAMES",
    "HAYSTACKS",
    "make_task",
    "prompt_ids",
    "string_match_all",
    "string_match_part",
    "first_word",
    "greedy_generate",
    "generate_answers",
    "evaluate_ruler",
    "compare_ruler",
]

Hook = tuple[str | Callable, Callable]

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
HAYSTACKS = ("corpora", "synthetic", "austen", "mobydick", "bible")
_CORPORA = ("austen", "mobydick", "bible")


# ---------------------------------------------------------------------------
# Samples and tasks
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One prompt with its reference answers.

    ``length``: target length in tokens (BOS included); ``n_tokens``: the
    prompt's actual length (``<= length``); ``depth``: relative depth (0..1) of
    the first queried needle in the haystack (``None`` for ``cwe``/``fwe``);
    ``needles``: the inserted needle sentences, ``needle_depths`` their depths;
    ``template``: how ``prompt`` is framed (see :func:`make_task`), which also
    decides whether BOS goes before it (:func:`prompt_ids`).
    """

    prompt: str
    answers: tuple[str, ...]
    task: str
    length: int
    depth: float | None
    n_tokens: int = 0
    metric: str = "string_match_all"
    max_new_tokens: int = 32
    needles: tuple[str, ...] = ()
    needle_depths: tuple[float, ...] = ()
    haystack: str = "synthetic"
    template: str = "base"


@dataclass(frozen=True)
class TaskSpec:
    """A task family: its builder, metric and default number of new tokens."""

    name: str
    build: Callable
    metric: str
    max_new_tokens: int
    description: str
    options: dict = field(default_factory=dict)


TEMPLATES = ("base", "chat")
_ANSWER = "\x1e"  # in a task text: where the question ends and the answer prefix starts


class _Tok:
    """A tokenizer view: ids without special tokens, BOS, context limit, prompt template.

    ``template="base"``: the task text as it is, after BOS (RULER's ``base``).
    ``template="chat"``: the question as the user turn of the tokenizer's chat
    template and the answer prefix as the start of the assistant turn (as
    RULER formats instruction-tuned models); no extra BOS (the template has its own).
    """

    def __init__(self, tokenizer_or_model, template: str = "base"):
        if template not in TEMPLATES:
            raise ValueError(f"unknown prompt template {template!r}; choose from {TEMPLATES}")
        self.template = template
        obj = tokenizer_or_model
        if hasattr(obj, "tokenizer") and hasattr(obj, "cfg"):  # a model
            self.tok = obj.tokenizer
            self.n_ctx = int(obj.cfg.n_ctx)
            prepend = bool(getattr(obj.cfg, "default_prepend_bos", True))
        elif callable(obj) and hasattr(obj, "decode"):
            self.tok = obj
            m = getattr(obj, "model_max_length", None)
            self.n_ctx = int(m) if m is not None and m < 10**7 else None
            prepend = True
        else:
            raise TypeError(f"expected a tokenizer or a model with .tokenizer, got {type(obj).__name__}")
        if self.tok is None:
            raise ValueError("the model has no tokenizer: RULER prompts need one")
        self.bos = self.tok.bos_token_id if prepend and template == "base" else None
        if template == "chat" and not getattr(self.tok, "chat_template", None):
            raise ValueError(
                f"template='chat' needs a tokenizer with a chat template; "
                f"{getattr(self.tok, 'name_or_path', type(self.tok).__name__)!r} has none (use template='base')"
            )

    def frame(self, text: str) -> str:
        """The prompt of a task text: its answer mark replaced by the template's framing."""
        if _ANSWER not in text:
            return text
        question, prefix = text.split(_ANSWER)
        if self.template == "base":
            return question + prefix
        user = [{"role": "user", "content": question.strip()}]
        return self.tok.apply_chat_template(user, add_generation_prompt=True, tokenize=False) + prefix.lstrip()

    def encode(self, text: str) -> list[int]:
        return self.tok(self.frame(text), add_special_tokens=False, verbose=False)["input_ids"]

    def count(self, text: str) -> int:
        return len(self.encode(text)) + (self.bos is not None)

    def ids(self, text: str) -> list[int]:
        return ([self.bos] if self.bos is not None else []) + self.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(list(ids))


def prompt_ids(tokenizer_or_model, prompt: str, template: str = "base") -> list[int]:
    """Token ids of ``prompt`` as evaluated: BOS (when the model prepends one and
    ``template="base"``) + text."""
    return _Tok(tokenizer_or_model, template).ids(prompt)


# ---- haystack sources ------------------------------------------------------


@functools.lru_cache(maxsize=4)
def _corpus_text(name: str) -> str:
    from .data import load_text

    return load_text(name)


def _source_text(haystack: str, rng: np.random.Generator, n_chars: int) -> str:
    """About ``n_chars`` characters of filler, whitespace-normalised."""
    if haystack == "synthetic":
        return NOISE * (n_chars // len(NOISE) + 1)
    name = _CORPORA[int(rng.integers(len(_CORPORA)))] if haystack == "corpora" else haystack
    text = _corpus_text(name)
    span = min(len(text), int(n_chars * 1.3) + 2000)  # raw text has extra whitespace
    start = int(rng.integers(0, max(1, len(text) - span)))
    m = re.search(r"[.!?]\s+(?=[A-Z\"'])", text[start : start + 5000])  # begin at a sentence
    if m:
        start += m.end()
    out = " ".join(text[start : start + span].split())
    while len(out) < n_chars:  # short corpus or dense whitespace: wrap around
        out += " " + " ".join(text[: n_chars].split())
    return out


def _boundary(text: str, pos: int) -> int:
    """The sentence boundary of ``text`` nearest to char ``pos`` (else a space)."""
    if pos <= 0:
        return 0
    if pos >= len(text):
        return len(text)
    window = 300
    lo, hi = max(0, pos - window), min(len(text), pos + window)
    cands = [m.end() for m in re.finditer(r"[.!?][\"')\]]*\s", text[lo:hi])]
    if cands:
        return lo + min(cands, key=lambda c: abs(lo + c - pos))
    sp = [m.end() for m in re.finditer(r"\s", text[lo:hi])]
    return lo + min(sp, key=lambda c: abs(lo + c - pos)) if sp else pos


def _insert(hay: str, needles: Sequence[tuple[str, float]]) -> str:
    """``hay`` with each ``(sentence, depth)`` inserted at a boundary near ``depth``."""
    spots = sorted(((_boundary(hay, round(d * len(hay))), i) for i, (_, d) in enumerate(needles)), reverse=True)
    for pos, i in spots:  # back to front: earlier positions stay valid
        left, right = hay[:pos].rstrip(), hay[pos:].lstrip()
        hay = " ".join(p for p in (left, needles[i][0], right) if p)
    return hay


def _fit_haystack(
    tok: _Tok, length: int, render: Callable[[str], str], haystack: str, rng: np.random.Generator,
    what: str,
) -> tuple[str, str]:
    """Cut a filler span so that ``render(filler)`` is exactly ``length`` tokens.

    ``render`` builds the prompt around a filler text (inserting needles).
    Returns ``(prompt, filler)``; if the exact length is not reachable the
    longest prompt under ``length`` within 8 tokens is used.
    """
    fixed = tok.count(render(""))
    budget = length - fixed
    if budget < 16:
        raise ValueError(
            f"{what}: length {length} leaves {budget} tokens of haystack after the template and "
            f"needles ({fixed} tokens); use a length of at least {fixed + 16}"
        )
    n_chars = budget * 8 + 200
    src_ids: list[int] = []
    while len(src_ids) < budget + 64:
        src_ids = tok.encode(_source_text(haystack, rng, n_chars))
        n_chars *= 2
    best = None  # (tokens, prompt, filler, n)

    def attempt(n: int):
        nonlocal best
        filler = tok.decode(src_ids[:n]).lstrip()  # a trailing space keeps every n distinct
        prompt = render(filler)
        t = tok.count(prompt)
        if t <= length and (best is None or t > best[0]):
            best = (t, prompt, filler, n)
        return t

    n = budget
    for _ in range(8):  # Newton-like steps: token counts move almost one for one
        t = attempt(n)
        if t == length:
            break
        n = max(1, min(len(src_ids), n + (length - t)))
    if best is None or best[0] != length:  # local scan around the best cut
        centre = best[3] if best is not None else n
        for n in sorted(range(max(1, centre - 6), min(len(src_ids), centre + 7)), key=lambda m: abs(m - centre)):
            if attempt(n) == length:
                break
    if best is None or length - best[0] > 8:
        raise RuntimeError(f"{what}: could not fit the haystack to {length} tokens (best {best and best[0]})")
    return best[1], best[2]


# ---- needle tasks ------------------------------------------------------------

_ADJ = (
    "ancient", "bitter", "brave", "calm", "clever", "cosmic", "crimson", "curious", "dusty", "eager",
    "elegant", "fancy", "fierce", "fragile", "gentle", "giant", "golden", "hollow", "humble", "icy",
    "jolly", "lively", "lonely", "lucky", "marble", "mellow", "misty", "noble", "odd", "pale", "polite",
    "proud", "quiet", "rapid", "rusty", "scarlet", "shiny", "silent", "silver", "sleepy", "smooth",
    "sour", "spicy", "stormy", "sturdy", "tender", "tiny", "velvet", "wild", "witty",
)
_NOUN = (
    "anchor", "badger", "banjo", "beacon", "biscuit", "blossom", "canyon", "castle", "cobra", "comet",
    "cricket", "dolphin", "dragon", "falcon", "forest", "glacier", "harbor", "helmet", "island",
    "jaguar", "kettle", "lantern", "lemon", "meadow", "mirror", "monkey", "needle", "ocean", "orchid",
    "otter", "panther", "parrot", "pebble", "pepper", "pillow", "planet", "pumpkin", "rabbit", "river",
    "rocket", "saddle", "salmon", "spider", "sprout", "thunder", "tiger", "trumpet", "tulip", "walrus",
    "willow",
)


def _keys(rng: np.random.Generator, n: int) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        k = f"{_ADJ[rng.integers(len(_ADJ))]}-{_NOUN[rng.integers(len(_NOUN))]}"
        if k not in out:
            out.append(k)
    return out


def _numbers(rng: np.random.Generator, n: int, digits: int = 7) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        v = str(int(rng.integers(10 ** (digits - 1), 10**digits)))
        if v not in out:
            out.append(v)
    return out


def _others(rng: np.random.Generator, n: int) -> list[float]:
    return [float(x) for x in rng.uniform(0.0, 1.0, size=n)]


def _join(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _niah(kind: str, tok, length, depth, rng, haystack, n_keys=4, n_values=4):
    keys = _keys(rng, n_keys if kind in ("multikey", "multiquery") else 1)
    if kind == "multivalue":
        values = _numbers(rng, n_values)
        needles = [(keys[0], v) for v in values]
        queried, answers = [keys[0]], values
    else:
        values = _numbers(rng, len(keys))
        needles = list(zip(keys, values))
        queried = keys if kind == "multiquery" else [keys[0]]
        answers = values if kind == "multiquery" else values[:1]
    depths = [depth] + _others(rng, len(needles) - 1)
    sentences = [f"One of the special magic numbers for {k} is: {v}." for k, v in needles]
    head = (
        "Some special magic numbers are hidden within the following text. Make sure to memorize it. "
        "I will quiz you about the numbers afterwards.\n"
    )
    if kind == "single" or kind == "multikey":
        q = queried[0]
        tail = (
            f"\nWhat is the special magic number for {q} mentioned in the provided text? {_ANSWER}"
            f"The special magic number for {q} mentioned in the provided text is"
        )
    else:
        q = _join(queried)
        tail = (
            f"\nWhat are all the special magic numbers for {q} mentioned in the provided text? {_ANSWER}"
            f"The special magic numbers for {q} mentioned in the provided text are"
        )
    render = lambda hay: head + _insert(hay, list(zip(sentences, depths))) + tail  # noqa: E731
    prompt, _ = _fit_haystack(tok, length, render, haystack, rng, f"niah_{kind}")
    return prompt, tuple(answers), sentences, depths


_VT_HEAD = "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n"


def _vt_question(value: str, n_vars: int, mark: str = "") -> str:
    return (
        f"\nQuestion: Find all variables that are assigned the value {value} in the text above. {mark}"
        f"Answer: According to the chain(s) of variable assignment in the text above, {n_vars} "
        f"variables are assigned the value {value}, they are:"
    )


def _vt_chains(rng: np.random.Generator, n_hops: int, n_chains: int, taken: set[str] = frozenset()):
    """``n_chains`` chains of ``n_hops + 1`` fresh 5-letter names, their values and statements."""
    names: set[str] = set()
    while len(names) < (n_hops + 1) * n_chains:
        n = "".join(rng.choice(list(string.ascii_uppercase), 5))
        if n not in taken:
            names.add(n)
    names = sorted(names)
    rng.shuffle(names)
    values = _numbers(rng, n_chains, digits=5)
    chains = [names[c * (n_hops + 1) : (c + 1) * (n_hops + 1)] for c in range(n_chains)]
    sentences = [
        [f"VAR {ch[0]} = {values[c]}."] + [f"VAR {ch[i]} = VAR {ch[i - 1]}." for i in range(1, len(ch))]
        for c, ch in enumerate(chains)
    ]
    return chains, values, sentences


def _vt_example(rng: np.random.Generator, n_hops: int, taken: set[str]) -> str:
    """RULER's one-shot demonstration: one chain in a short noise haystack, answered."""
    chains, values, sentences = _vt_chains(rng, n_hops, 1, taken)
    depths = np.linspace(0.0, 1.0, n_hops + 1, endpoint=False)
    body = _insert(NOISE.strip(), list(zip(sentences[0], depths)))
    return _VT_HEAD + body + _vt_question(values[0], n_hops + 1) + " " + " ".join(chains[0]) + "\n\n"


def _vt(tok, length, depth, rng, haystack, n_hops=4, n_chains=1, one_shot=True):
    chains, values, sentences = _vt_chains(rng, n_hops, n_chains)
    # chain statements in order, evenly spread from `depth` to the end (jittered)
    span = 1.0 - depth
    depths_per_chain = []
    for c in range(n_chains):
        base = np.linspace(depth, depth + span, n_hops + 1, endpoint=False)
        jitter = rng.uniform(0, span / (n_hops + 1) * 0.5, size=n_hops + 1) if c else np.zeros(n_hops + 1)
        depths_per_chain.append([float(min(1.0, d + j)) for d, j in zip(base, jitter)])
    needles = [(s, d) for ss, ds in zip(sentences, depths_per_chain) for s, d in zip(ss, ds)]
    example = _vt_example(rng, n_hops, {n for ch in chains for n in ch}) if one_shot else ""
    tail = _vt_question(values[0], n_hops + 1, _ANSWER)
    render = lambda hay: example + _VT_HEAD + _insert(hay, needles) + tail  # noqa: E731
    prompt, _ = _fit_haystack(tok, length, render, haystack, rng, "vt")
    return prompt, tuple(chains[0]), [s for s, _ in needles], [d for _, d in needles]


# ---- question answering over documents ------------------------------------------------

_QA_INSTRUCTION = (
    "Answer the question based on the given documents. Only give me the answer and do not output "
    "any other words."
)


@functools.lru_cache(maxsize=1)
def _boolq_items() -> tuple[tuple[str, str, str], ...]:
    """``(passage, question, answer)`` of BoolQ dev (``../shared/data/zeroshot/boolq``)."""
    import json

    from .zeroshot import zeroshot_dir

    path = zeroshot_dir() / "boolq" / "dev.llmfoundry.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"qa_boolq needs the BoolQ dev file {path}")
    out = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        d = json.loads(line)
        m = re.match(r"Passage: (.*)\nQuestion: (.*)$", d["query"], re.S)
        if m:
            q = m.group(2).strip().rstrip("?")
            out.append((m.group(1).strip(), q[:1].upper() + q[1:] + "?", d["choices"][d["gold"]]))
    return tuple(out)


def _qa_boolq(tok, length, depth, rng, haystack):
    """RULER's QA layout on BoolQ: the gold passage among distractor passages, yes/no answer.

    ``haystack`` is not used: the distractors are other BoolQ passages (RULER
    uses other SQuAD/HotpotQA paragraphs). The gold document goes to the
    position nearest ``depth``; documents are added until ``length`` is reached.
    """
    items = _boolq_items()
    gold = int(rng.integers(len(items)))
    passage, question, answer = items[gold]
    others = [items[i][0] for i in rng.permutation(len(items)) if i != gold]

    def render(n: int, n_words: int = 0) -> str:
        docs = others[:n] + ([" ".join(others[n].split()[:n_words])] if n_words else [])
        docs.insert(min(len(docs), int(round(depth * len(docs)))), passage)
        body = "\n\n".join(f"Document {i + 1}:\n{d}" for i, d in enumerate(docs))
        return (
            f"{_QA_INSTRUCTION}\n\nThe following are given documents.\n\n{body}\n\n"
            f"{_QA_INSTRUCTION}\n\nQuestion: {question}\n{_ANSWER}Answer:"
        )

    _, n = _fit_count(tok, length, render, 0, 4, "qa_boolq")
    # the last document is cut to the words that still fit (RULER stops at whole documents)
    prompt, k = _fit_count(tok, length, lambda m: render(n, m), 0, len(others[n].split()), "qa_boolq")
    n_docs = n + 1 + (k > 0)
    pos = min(n_docs - 1, int(round(depth * (n_docs - 1))))
    return prompt, (answer,), [passage], [pos / max(n_docs - 1, 1)]


# ---- word-counting tasks ------------------------------------------------------


@functools.lru_cache(maxsize=4)
def _word_pool(haystack: str) -> tuple[str, ...]:
    """Distinct lowercase words (4..10 letters) for ``cwe``; pseudo-words when synthetic."""
    if haystack == "synthetic":
        g = np.random.default_rng(1234)
        cons, vow = "bcdfghklmnprstvz", "aeiou"
        words = set()
        while len(words) < 3000:
            n = int(g.integers(2, 4))
            words.add("".join(cons[g.integers(16)] + vow[g.integers(5)] for _ in range(n)) + cons[g.integers(16)])
        return tuple(sorted(words))
    text = " ".join(_corpus_text(c) for c in (_CORPORA if haystack == "corpora" else (haystack,)))
    counts: dict[str, int] = {}
    for w in re.findall(r"\b[a-z]{4,10}\b", text):
        counts[w] = counts.get(w, 0) + 1
    ranked = sorted(counts, key=lambda w: (-counts[w], w))
    return tuple(sorted(ranked[:4000]))


def _distinct(rng: np.random.Generator, pool: Sequence[str], n: int) -> list[str]:
    """``n`` words of ``pool``, none a substring of another (for substring scoring)."""
    out: list[str] = []
    for i in rng.permutation(len(pool)):
        w = pool[i]
        if all(w not in o and o not in w for o in out):
            out.append(w)
            if len(out) == n:
                return out
    raise ValueError(f"word pool too small for {n} distinct words")


def _fit_count(tok, length: int, render: Callable[[int], str], lo: int, hi: int, what: str) -> tuple[str, int]:
    """The largest ``n`` in ``[lo, hi]`` with ``render(n)`` at most ``length`` tokens (binary search)."""
    if tok.count(render(lo)) > length:
        raise ValueError(f"{what}: length {length} is too short for the task ({tok.count(render(lo))} tokens at minimum)")
    while tok.count(render(hi)) <= length:
        lo, hi = hi, hi * 2
        if hi > 10**6:
            raise RuntimeError(f"{what}: could not reach {length} tokens")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if tok.count(render(mid)) <= length else (lo, mid)
    return render(lo), lo


def _cwe(tok, length, rng, haystack, k=10, freq_cw=30, freq_ucw=3):
    pool = _word_pool(haystack)
    words = _distinct(rng, pool, min(len(pool) // 2, 1500))
    common, rare = words[:k], words[k:]
    head = (
        "Below is a numbered list of words. In these words, some appear more often than others. "
        "Memorize the ones that appear most often.\n"
    )
    tail = (
        f"\nQuestion: What are the {k} most common words in the above list? {_ANSWER}"
        f"Answer: The top {k} words that appear most often in the list are:"
    )

    # common words may fill at most half of the list (est: entries that fit the length)
    per_entry = tok.count(" ".join(f"{i + 100}. {w}" for i, w in enumerate(rare[:50]))) / 50
    fixed = tok.count(head + tail)
    est = max(1, int((length - fixed) / per_entry))
    f_cw = int(min(freq_cw, max(freq_ucw + 2, est // (2 * k))))
    if k * f_cw > est:
        raise ValueError(
            f"cwe: length {length} is too short for {k} common words seen {f_cw} times "
            f"(about {int(fixed + k * f_cw * per_entry)} tokens at least)"
        )
    order_seed = int(rng.integers(2**31))

    def render(n_rare: int, n_once: int = 0) -> str:
        if n_rare + n_once > len(rare):
            raise ValueError(f"cwe: length {length} too large for the word pool ({len(rare)} rare words)")
        lst = [w for w in common for _ in range(f_cw)] + [w for w in rare[:n_rare] for _ in range(freq_ucw)]
        lst += rare[n_rare : n_rare + n_once]  # fine length adjustment: words seen once
        np.random.default_rng(order_seed).shuffle(lst)
        return head + " ".join(f"{i + 1}. {w}" for i, w in enumerate(lst)) + tail

    hi = max(2, min(len(rare), est // freq_ucw))
    _, n_rare = _fit_count(tok, length, render, 0, hi, "cwe")
    prompt, _ = _fit_count(tok, length, lambda m: render(n_rare, m), 0, 4, "cwe")
    return prompt, tuple(common)


def _fwe(tok, length, rng, haystack, alpha=2.0, n_answers=3):
    letters = list(string.ascii_lowercase)
    vocab: list[str] = []
    while len(vocab) < 400:
        w = "".join(rng.choice(letters, int(rng.integers(3, 6))))
        if all(w not in o and o not in w for o in vocab):
            vocab.append(w)
    vocab[0] = "...."  # RULER: the most frequent "word" is noise, to be ignored
    order_seed = int(rng.integers(2**31))
    head = (
        "Read the following coded text and track the frequency of each coded word. "
        f"Find the {n_answers} most frequently appeared coded words. "
    )
    tail = (
        "\nQuestion: Do not provide any explanation. Please ignore the dots '....'. "
        f"What are the {n_answers} most frequently appeared words in the above coded text? {_ANSWER}"
        f"Answer: According to the coded text above, the {n_answers} most frequently appeared words are:"
    )
    weights = 1.0 / np.arange(1, len(vocab) // 2 + 1) ** alpha
    weights /= weights.sum()

    n_zipf = len(vocab) // 2  # the other half: words seen once, for the fine length adjustment

    def render(total: int, n_once: int = 0) -> str:
        counts = np.floor(weights * total).astype(int)
        lst = [w for w, c in zip(vocab[:n_zipf], counts) for _ in range(c)] + vocab[n_zipf : n_zipf + n_once]
        np.random.default_rng(order_seed).shuffle(lst)
        return head + " ".join(lst) + tail

    _, total = _fit_count(tok, length, render, 20, max(40, length), "fwe")
    prompt, _ = _fit_count(tok, length, lambda m: render(total, m), 0, 4, "fwe")
    counts = np.floor(weights * total).astype(int)
    if not (counts[1] > counts[2] > counts[3] > counts[4]):
        raise ValueError(f"fwe: length {length} too short for distinct top-{n_answers} counts")
    return prompt, tuple(vocab[1 : 1 + n_answers])


def _needle_builder(kind):
    def build(tok, length, depth, rng, haystack, **kw):
        return _niah(kind, tok, length, depth, rng, haystack, **kw)

    return build


TASKS: dict[str, TaskSpec] = {
    t.name: t
    for t in [
        TaskSpec("niah_single", _needle_builder("single"), "string_match_all", 12, "one key, one value"),
        TaskSpec("niah_multikey", _needle_builder("multikey"), "string_match_all", 12,
                 "4 keys, one queried", {"n_keys": 4}),
        TaskSpec("niah_multivalue", _needle_builder("multivalue"), "string_match_all", 40,
                 "one key, 4 values", {"n_values": 4}),
        TaskSpec("niah_multiquery", _needle_builder("multiquery"), "string_match_all", 40,
                 "4 keys, all queried", {"n_keys": 4}),
        TaskSpec("vt", _vt, "string_match_all", 24,
                 "variable tracking: 1 chain of 4 hops, after a one-shot example (as RULER)",
                 {"n_hops": 4, "n_chains": 1, "one_shot": True}),
        TaskSpec("cwe", _cwe, "string_match_all", 48, "common words: top 10 of a numbered list",
                 {"k": 10, "freq_cw": 30, "freq_ucw": 3}),
        TaskSpec("fwe", _fwe, "string_match_all", 24, "frequent coded words (Zipf, alpha 2): top 3",
                 {"alpha": 2.0, "n_answers": 3}),
        TaskSpec("qa_boolq", _qa_boolq, "first_word", 4,
                 "QA: a BoolQ passage among distractor passages, yes/no (chance 50%)"),
    ]
}
TASK_NAMES: tuple[str, ...] = tuple(TASKS)
_NEEDLE_TASKS = ("niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery", "vt", "qa_boolq")


def make_task(
    task: str,
    tokenizer_or_model,
    length: int,
    n_samples: int,
    seed: int = 0,
    haystack: str = "corpora",
    depths: float | Sequence[float] | None = None,
    template: str = "base",
    **options,
) -> list[Sample]:
    """``n_samples`` prompts of ``task`` with exactly ``length`` tokens (BOS included).

    ``haystack``: ``"corpora"`` (random spans of Austen/Moby Dick/Bible),
    ``"synthetic"`` (RULER's noise sentences) or one corpus name. ``depths``:
    needle depth(s) in [0, 1] (one for all samples or one per sample); default
    evenly spread, ``(i + 0.5) / n_samples``. ``options`` override the task's
    defaults (e.g. ``n_keys``, ``n_hops``, ``k``). ``template``: ``"base"``
    (the raw task text after BOS) or ``"chat"`` (the question in the
    tokenizer's chat template, the answer prefix opening the assistant turn;
    the length counts the template's tokens). Deterministic in ``seed``.
    """
    if task not in TASKS:
        raise ValueError(f"unknown RULER task {task!r}; known tasks: {list(TASKS)}")
    if haystack not in HAYSTACKS:
        raise ValueError(f"unknown haystack {haystack!r}; choose from {HAYSTACKS}")
    if not isinstance(n_samples, int) or n_samples < 1:
        raise ValueError(f"n_samples must be a positive integer, got {n_samples!r}")
    if not isinstance(length, int) or length < 1:
        raise ValueError(f"length must be a positive integer, got {length!r}")
    tok = _Tok(tokenizer_or_model, template)
    if tok.n_ctx is not None and length > tok.n_ctx:
        raise ValueError(f"length {length} exceeds the model's context of {tok.n_ctx} tokens")
    spec = TASKS[task]
    unknown = set(options) - set(spec.options)
    if unknown:
        raise ValueError(f"unknown option(s) {sorted(unknown)} for {task}; known: {sorted(spec.options)}")
    opts = {**spec.options, **options}
    if depths is None:
        ds = [(i + 0.5) / n_samples for i in range(n_samples)]
    elif isinstance(depths, (int, float)):
        ds = [float(depths)] * n_samples
    else:
        ds = [float(d) for d in depths]
        if len(ds) != n_samples:
            raise ValueError(f"got {len(ds)} depths for {n_samples} samples")
    if any(not 0.0 <= d <= 1.0 for d in ds):
        raise ValueError(f"depths must lie in [0, 1], got {ds}")

    out = []
    for i in range(n_samples):
        # one generator per sample: sample i does not depend on n_samples
        rng = np.random.default_rng([seed, i, length, TASK_NAMES.index(task), HAYSTACKS.index(haystack)])
        needles: Sequence[str] = ()
        nd: Sequence[float] = ()
        if task in _NEEDLE_TASKS:
            prompt, answers, needles, nd = spec.build(tok, length, ds[i], rng, haystack, **opts)
            depth = ds[i]
        else:
            prompt, answers = spec.build(tok, length, rng, haystack, **opts)
            depth = None
        prompt = tok.frame(prompt)
        out.append(Sample(
            prompt=prompt, answers=tuple(answers), task=task, length=length, depth=depth,
            n_tokens=tok.count(prompt), metric=spec.metric, max_new_tokens=spec.max_new_tokens,
            needles=tuple(needles), needle_depths=tuple(nd), haystack=haystack, template=template,
        ))
    return out


# ---------------------------------------------------------------------------
# Scoring (RULER's string matching, in percent)
# ---------------------------------------------------------------------------


def _check(preds: Sequence[str], refs: Sequence[Sequence[str]]) -> None:
    if len(preds) != len(refs):
        raise ValueError(f"{len(preds)} predictions for {len(refs)} reference lists")
    if not preds:
        raise ValueError("no predictions to score")
    if any(len(r) == 0 for r in refs):
        raise ValueError("a reference list is empty")


def string_match_all(preds: Sequence[str], refs: Sequence[Sequence[str]]) -> float:
    """Mean over samples of the fraction of references found in the output (case-insensitive), x100."""
    _check(preds, refs)
    return 100.0 * float(np.mean([
        sum(r.lower() in p.lower() for r in rs) / len(rs) for p, rs in zip(preds, refs)
    ]))


def string_match_part(preds: Sequence[str], refs: Sequence[Sequence[str]]) -> float:
    """Mean over samples of whether any reference is found in the output (case-insensitive), x100."""
    _check(preds, refs)
    return 100.0 * float(np.mean([
        max(float(r.lower() in p.lower()) for r in rs) for p, rs in zip(preds, refs)
    ]))


def first_word(preds: Sequence[str], refs: Sequence[Sequence[str]]) -> float:
    """Mean over samples of whether the output's first word is a reference (case-insensitive), x100.

    For one-word answers such as yes/no, where substring matching would count
    "no" inside "not" or "know"."""
    _check(preds, refs)
    firsts = [(re.findall(r"[a-z0-9]+", p.lower()) or [""])[0] for p in preds]
    return 100.0 * float(np.mean([f in {r.lower() for r in rs} for f, rs in zip(firsts, refs)]))


METRICS = {"string_match_all": string_match_all, "string_match_part": string_match_part, "first_word": first_word}


# ---------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------


def _stop_ids(tokenizer) -> list[int]:
    ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    for i, t in (getattr(tokenizer, "added_tokens_decoder", {}) or {}).items():
        if getattr(t, "special", False):
            ids.add(int(i))
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return sorted(ids)


_UNEMBED_IN = "unembed.hook_in"


def _last_position(resid: Float[Tensor, "batch pos d_model"], hook) -> Float[Tensor, "batch 1 d_model"]:
    return resid[:, -1:]


def greedy_generate(
    model,
    tokens: Int[Tensor, "batch pos"],
    max_new_tokens: int,
    *,
    fwd_hooks: Iterable[Hook] = (),
    use_kv_cache: bool = True,
    stop_ids: Sequence[int] | None = None,
) -> Int[Tensor, "batch new"]:
    """Greedy continuation ``[batch, new]`` of equal-length prompts with ``fwd_hooks`` active.

    Uses the bridge's ``generate`` (KV cache on by default); sequences that
    emit a ``stop_ids`` token are padded with it until all stop. Only the last
    position is unembedded (a hook on ``unembed.hook_in``, after ``fwd_hooks``):
    the prefill's ``[batch, pos, d_vocab]`` logits, which ``generate`` would
    compute and drop but for one position, are never made.
    """
    if tokens.ndim != 2 or tokens.shape[1] == 0:
        raise ValueError(f"tokens must be [batch, pos] with pos >= 1, got {tuple(tokens.shape)}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if tokens.shape[1] + max_new_tokens > model.cfg.n_ctx:
        raise ValueError(
            f"prompt of {tokens.shape[1]} tokens + {max_new_tokens} new tokens exceeds the "
            f"model's context of {model.cfg.n_ctx} tokens"
        )
    kw = dict(stop_at_eos=False)
    if stop_ids:
        kw = dict(stop_at_eos=True, eos_token_id=list(stop_ids))
    device = getattr(model.cfg, "device", None) or "cpu"
    hooks = list(fwd_hooks)
    if _UNEMBED_IN in model.hook_dict:
        hooks.append((_UNEMBED_IN, _last_position))
    with torch.inference_mode(), model.hooks(fwd_hooks=hooks):
        out = model.generate(
            tokens.to(device), max_new_tokens=max_new_tokens, do_sample=False,
            use_past_kv_cache=use_kv_cache, verbose=False, return_type="tokens", **kw,
        )
    return out[:, tokens.shape[1] :].cpu()


def _decode_answer(tokenizer, ids: Sequence[int], stop: set[int]) -> str:
    cut = list(ids)
    for j, t in enumerate(cut):
        if t in stop:
            cut = cut[:j]
            break
    return " ".join(tokenizer.decode(cut).split())  # RULER: newlines to spaces, strip


def generate_answers(
    model,
    samples: Sequence[Sample],
    *,
    fwd_hooks: Iterable[Hook] = (),
    max_new_tokens: int | None = None,
    batch_size: int = 4,
    use_kv_cache: bool = True,
) -> list[str]:
    """Greedy outputs for ``samples`` (prompts of equal token length batched together)."""
    hooks = list(fwd_hooks)
    ids = [prompt_ids(model, s.prompt, s.template) for s in samples]
    stop = _stop_ids(model.tokenizer)
    preds: list[str | None] = [None] * len(samples)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, s in enumerate(samples):
        n_new = max_new_tokens if max_new_tokens is not None else s.max_new_tokens
        groups.setdefault((len(ids[i]), n_new), []).append(i)
    for (_, n_new), idx in groups.items():
        for b in range(0, len(idx), batch_size):
            chunk = idx[b : b + batch_size]
            toks = torch.tensor([ids[i] for i in chunk], dtype=torch.long)
            new = greedy_generate(model, toks, n_new, fwd_hooks=hooks, use_kv_cache=use_kv_cache, stop_ids=stop)
            for i, row in zip(chunk, new.tolist()):
                preds[i] = _decode_answer(model.tokenizer, row, set(stop))
    return preds  # type: ignore[return-value]


# ---------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------

KEY = ("label", "task", "length", "n", "haystack", "seed", "template")


def evaluate_ruler(
    model,
    tasks: Sequence[str] = TASK_NAMES,
    lengths: Sequence[int] = (1024, 2048, 4096),
    n_samples: int = 4,
    *,
    fwd_hooks: Iterable[Hook] = (),
    max_new_tokens: int | None = None,
    log_path: str | os.PathLike | None = None,
    label: str = "none",
    seed: int = 0,
    haystack: str = "corpora",
    batch_size: int = 4,
    use_kv_cache: bool = True,
    template: str = "base",
    progress: bool = False,
) -> pd.DataFrame:
    """RULER score (percent) of ``model`` per (task, length), greedy, with ``fwd_hooks`` active.

    Returns one row per (task, length): ``label, task, length, n, score,
    haystack, seed, template, n_tokens`` (mean prompt length), ``wall_s``, ``preds``.
    With ``log_path`` each (label, task, length) row is stored as soon as it is
    scored and skipped on a rerun (``label`` names the edit). ``max_new_tokens``
    overrides the per-task defaults; ``template``: see :func:`make_task`.
    """
    tasks, lengths = list(tasks), list(lengths)
    if not tasks or not lengths:
        raise ValueError(f"empty grid: tasks={tasks}, lengths={lengths}")
    for t in tasks:
        if t not in TASKS:
            raise ValueError(f"unknown RULER task {t!r}; known tasks: {list(TASKS)}")
    _Tok(model, template)  # an unknown template, or "chat" without a chat template, fails here
    n_ctx = model.cfg.n_ctx
    for L in lengths:
        extra = max_new_tokens if max_new_tokens is not None else max(TASKS[t].max_new_tokens for t in tasks)
        if L > n_ctx or L + extra > n_ctx:
            raise ValueError(
                f"length {L} (+{extra} new tokens) exceeds the model's context of {n_ctx} tokens"
            )
    hooks = list(fwd_hooks)
    log = ResultLog(log_path, KEY) if log_path is not None else None
    rows = []
    grid = [(t, L) for t in tasks for L in lengths]
    if progress:
        from tqdm.auto import tqdm

        grid = tqdm(grid, desc=f"ruler {label}", unit="cell")
    for task, length in grid:
        key = dict(label=label, task=task, length=length, n=n_samples, haystack=haystack, seed=seed,
                   template=template)
        row = log.get(**key) if log is not None else None
        if row is None:
            t0 = time.perf_counter()
            samples = make_task(task, model, length, n_samples, seed=seed, haystack=haystack, template=template)
            preds = generate_answers(
                model, samples, fwd_hooks=hooks, max_new_tokens=max_new_tokens,
                batch_size=batch_size, use_kv_cache=use_kv_cache,
            )
            score = METRICS[samples[0].metric](preds, [s.answers for s in samples])
            row = {
                **key, "score": score, "n_tokens": float(np.mean([s.n_tokens for s in samples])),
                "wall_s": time.perf_counter() - t0, "preds": preds,
            }
            if log is not None:
                log.add(row)
        rows.append(row)
    return pd.DataFrame(rows)


def compare_ruler(model, edits: Sequence, **kwargs) -> pd.DataFrame:
    """:func:`evaluate_ruler` unedited (``label="none"``) and under each :class:`~tlgeo.edits.Edit`.

    Labels are ``"<site> s_par=<a> s_perp=<b> skip=<k>"``; ``kwargs`` go to
    :func:`evaluate_ruler` (one ``log_path`` serves all runs).
    """
    frames = [evaluate_ruler(model, label="none", **kwargs)]
    for e in edits:
        d = e.describe()
        label = f"{d['site']} s_par={d['s_par']} s_perp={d['s_perp']} skip={d['skip_first']}"
        if d["layers"] != "all" or d["heads"] != "all":
            label += f" layers={d['layers']} heads={d['heads']}"
        frames.append(evaluate_ruler(model, fwd_hooks=e.hooks(model), label=label, **kwargs))
    return pd.concat(frames, ignore_index=True)
