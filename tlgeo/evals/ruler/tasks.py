"""RULER task generation: haystacks, needles and the task families, seeded and offline.

See :mod:`tlgeo.evals.ruler` for the table of tasks. Lengths are in tokens of
the model's tokenizer, BOS included; the haystack is cut to hit the target
(exactly for the needle tasks and ``vt``, within one list entry for
``cwe``/``fwe``), never above it. Needles go to sentence boundaries at the
requested depth. Everything is deterministic in the seed.
"""

from __future__ import annotations

import functools
import re
import string
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from .prompts import _ANSWER, _Tok
from ...errors import InputError

__all__ = ["Sample", "TaskSpec", "TASKS", "TASK_NAMES", "HAYSTACKS", "NOISE", "make_task"]

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


# ---- haystack sources ------------------------------------------------------


@functools.lru_cache(maxsize=4)
def _corpus_text(name: str) -> str:
    from ...data import load_text

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
        out += " " + " ".join(text[:n_chars].split())
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
    tok: _Tok,
    length: int,
    render: Callable[[str], str],
    haystack: str,
    rng: np.random.Generator,
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
        raise InputError(
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
    "ancient",
    "bitter",
    "brave",
    "calm",
    "clever",
    "cosmic",
    "crimson",
    "curious",
    "dusty",
    "eager",
    "elegant",
    "fancy",
    "fierce",
    "fragile",
    "gentle",
    "giant",
    "golden",
    "hollow",
    "humble",
    "icy",
    "jolly",
    "lively",
    "lonely",
    "lucky",
    "marble",
    "mellow",
    "misty",
    "noble",
    "odd",
    "pale",
    "polite",
    "proud",
    "quiet",
    "rapid",
    "rusty",
    "scarlet",
    "shiny",
    "silent",
    "silver",
    "sleepy",
    "smooth",
    "sour",
    "spicy",
    "stormy",
    "sturdy",
    "tender",
    "tiny",
    "velvet",
    "wild",
    "witty",
)
_NOUN = (
    "anchor",
    "badger",
    "banjo",
    "beacon",
    "biscuit",
    "blossom",
    "canyon",
    "castle",
    "cobra",
    "comet",
    "cricket",
    "dolphin",
    "dragon",
    "falcon",
    "forest",
    "glacier",
    "harbor",
    "helmet",
    "island",
    "jaguar",
    "kettle",
    "lantern",
    "lemon",
    "meadow",
    "mirror",
    "monkey",
    "needle",
    "ocean",
    "orchid",
    "otter",
    "panther",
    "parrot",
    "pebble",
    "pepper",
    "pillow",
    "planet",
    "pumpkin",
    "rabbit",
    "river",
    "rocket",
    "saddle",
    "salmon",
    "spider",
    "sprout",
    "thunder",
    "tiger",
    "trumpet",
    "tulip",
    "walrus",
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
    "Answer the question based on the given documents. Only give me the answer and do not output any other words."
)


@functools.lru_cache(maxsize=1)
def _boolq_items() -> tuple[tuple[str, str, str], ...]:
    """``(passage, question, answer)`` of BoolQ dev (``../shared/data/zeroshot/boolq``)."""
    import json

    from ..zeroshot import zeroshot_dir

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
    raise InputError(f"word pool too small for {n} distinct words")


def _fit_count(tok, length: int, render: Callable[[int], str], lo: int, hi: int, what: str) -> tuple[str, int]:
    """The largest ``n`` in ``[lo, hi]`` with ``render(n)`` at most ``length`` tokens (binary search)."""
    if tok.count(render(lo)) > length:
        raise InputError(
            f"{what}: length {length} is too short for the task ({tok.count(render(lo))} tokens at minimum)"
        )
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
        raise InputError(
            f"cwe: length {length} is too short for {k} common words seen {f_cw} times "
            f"(about {int(fixed + k * f_cw * per_entry)} tokens at least)"
        )
    order_seed = int(rng.integers(2**31))

    def render(n_rare: int, n_once: int = 0) -> str:
        if n_rare + n_once > len(rare):
            raise InputError(f"cwe: length {length} too large for the word pool ({len(rare)} rare words)")
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
        raise InputError(f"fwe: length {length} too short for distinct top-{n_answers} counts")
    return prompt, tuple(vocab[1 : 1 + n_answers])


def _needle_builder(kind):
    def build(tok, length, depth, rng, haystack, **kw):
        return _niah(kind, tok, length, depth, rng, haystack, **kw)

    return build


TASKS: dict[str, TaskSpec] = {
    t.name: t
    for t in [
        TaskSpec("niah_single", _needle_builder("single"), "string_match_all", 12, "one key, one value"),
        TaskSpec(
            "niah_multikey", _needle_builder("multikey"), "string_match_all", 12, "4 keys, one queried", {"n_keys": 4}
        ),
        TaskSpec(
            "niah_multivalue",
            _needle_builder("multivalue"),
            "string_match_all",
            40,
            "one key, 4 values",
            {"n_values": 4},
        ),
        TaskSpec(
            "niah_multiquery",
            _needle_builder("multiquery"),
            "string_match_all",
            40,
            "4 keys, all queried",
            {"n_keys": 4},
        ),
        TaskSpec(
            "vt",
            _vt,
            "string_match_all",
            24,
            "variable tracking: 1 chain of 4 hops, after a one-shot example (as RULER)",
            {"n_hops": 4, "n_chains": 1, "one_shot": True},
        ),
        TaskSpec(
            "cwe",
            _cwe,
            "string_match_all",
            48,
            "common words: top 10 of a numbered list",
            {"k": 10, "freq_cw": 30, "freq_ucw": 3},
        ),
        TaskSpec(
            "fwe",
            _fwe,
            "string_match_all",
            24,
            "frequent coded words (Zipf, alpha 2): top 3",
            {"alpha": 2.0, "n_answers": 3},
        ),
        TaskSpec(
            "qa_boolq", _qa_boolq, "first_word", 4, "QA: a BoolQ passage among distractor passages, yes/no (chance 50%)"
        ),
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
        raise InputError(f"unknown RULER task {task!r}; known tasks: {list(TASKS)}")
    if haystack not in HAYSTACKS:
        raise InputError(f"unknown haystack {haystack!r}; choose from {HAYSTACKS}")
    if not isinstance(n_samples, int) or n_samples < 1:
        raise InputError(f"n_samples must be a positive integer, got {n_samples!r}")
    if not isinstance(length, int) or length < 1:
        raise InputError(f"length must be a positive integer, got {length!r}")
    tok = _Tok(tokenizer_or_model, template)
    if tok.n_ctx is not None and length > tok.n_ctx:
        raise InputError(f"length {length} exceeds the model's context of {tok.n_ctx} tokens")
    spec = TASKS[task]
    unknown = set(options) - set(spec.options)
    if unknown:
        raise InputError(f"unknown option(s) {sorted(unknown)} for {task}; known: {sorted(spec.options)}")
    opts = {**spec.options, **options}
    if depths is None:
        ds = [(i + 0.5) / n_samples for i in range(n_samples)]
    elif isinstance(depths, (int, float)):
        ds = [float(depths)] * n_samples
    else:
        ds = [float(d) for d in depths]
        if len(ds) != n_samples:
            raise InputError(f"got {len(ds)} depths for {n_samples} samples")
    if any(not 0.0 <= d <= 1.0 for d in ds):
        raise InputError(f"depths must lie in [0, 1], got {ds}")

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
        out.append(
            Sample(
                prompt=prompt,
                answers=tuple(answers),
                task=task,
                length=length,
                depth=depth,
                n_tokens=tok.count(prompt),
                metric=spec.metric,
                max_new_tokens=spec.max_new_tokens,
                needles=tuple(needles),
                needle_depths=tuple(nd),
                haystack=haystack,
                template=template,
            )
        )
    return out
