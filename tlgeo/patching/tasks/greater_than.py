"""Greater-than (Hanna et al. 2023): "The war lasted from the year 1732 to the year 17"."""

from __future__ import annotations

from .base import Task, TaskError, _Candidate, _check_n, _decode, _encode, _make_task, _select


# ---------------------------------------------------------------------------------------------
# greater-than (Hanna et al. 2023)

YEAR_NOUNS: tuple[str, ...] = (
    "war",
    "expedition",
    "drought",
    "reign",
    "famine",
    "siege",
    "journey",
    "rebellion",
    "occupation",
    "voyage",
    "conflict",
    "dynasty",
)
CENTURIES: tuple[str, ...] = ("17", "18", "19")


def _year_split(tokenizer, cc: str, yy: str) -> list[int] | None:
    """The tokens of ``yy`` in ``" {cc}{yy}"`` when the year splits as ``" {cc}"`` + the rest, else None."""
    head = _encode(tokenizer, f" {cc}")
    ids = _encode(tokenizer, f" {cc}{yy}")
    return ids[len(head) :] if ids[: len(head)] == head and len(ids) > len(head) else None


def _year_mode(tokenizer) -> str:
    tail = _year_split(tokenizer, "17", "32")
    if tail is not None and len(tail) == 1 and _decode(tokenizer, tail) == "32":
        return "two_digit"
    if tail is not None and len(tail) == 2 and [_decode(tokenizer, [t]) for t in tail] == ["3", "2"]:
        return "digit"
    raise TaskError(
        f"this tokenizer splits ' 1732' as {_encode(tokenizer, ' 1732')}: the greater-than task needs "
        f"' 17' + a two-digit token '32' (GPT-2 style) or one token per digit (SmolLM2, Gemma)"
    )


def _answer_ids(tokenizer, mode: str) -> list[int]:
    """The token of each answer: digits 0-9 (``"digit"``) or ``"00"``-``"99"`` (``"two_digit"``)."""
    out = []
    for v in range(10 if mode == "digit" else 100):
        text = str(v) if mode == "digit" else f"{v:02d}"
        tail = _year_split(tokenizer, "17", text + "0" if mode == "digit" else text)
        want = 2 if mode == "digit" else 1
        if tail is not None and len(tail) == want and _decode(tokenizer, tail[:1]) == text:
            out.append(tail[0])
            continue
        alone = _encode(tokenizer, text)
        if len(alone) == 1 and _decode(tokenizer, alone) == text:
            out.append(alone[0])
            continue
        raise TaskError(f"greater-than: no single token for {text!r} in this tokenizer")
    return out


def greater_than_task(tokenizer, *, n: int, seed: int = 0, bos: int | None = None) -> Task:
    """Greater-than: ``"The war lasted from the year 1732 to the year 17"`` -> a later year.

    The tokenizer's year split is detected from ``" 1732"``. GPT-2 style (``" 17"`` + ``"32"``): the
    answers are the two-digit tokens, ``correct`` = YY+1..99, ``wrong`` = 00..YY, YY in 02..98.
    One token per digit (SmolLM2, Gemma): the next token is the tens digit, ``correct`` = digits
    above the tens digit of YY, ``wrong`` = digits below it (the equal one left out), tens in 1..8.
    Otherwise :class:`TaskError`. Corrupted: the same prompt with YY = ``"01"``. Nouns
    :data:`YEAR_NOUNS`, centuries :data:`CENTURIES`; metric ``prob_diff``; positions ``"YY"`` (the
    first token of the clean year's YY part) and ``"end"``. Only years that split as ``" {CC}"`` +
    YY tokens in context are kept; candidates are grouped by token length and the first ``n`` of the
    largest group (ties: the shorter) in a seeded order are kept: fewer than ``n`` only if fewer
    exist, :class:`TaskError` if fewer than 2.
    """
    _check_n(n)
    mode = _year_mode(tokenizer)
    answers = _answer_ids(tokenizer, mode)
    middle = _encode(tokenizer, " to the year")
    cands: list[_Candidate] = []
    yys = range(10, 90) if mode == "digit" else range(2, 99)
    for noun in YEAR_NOUNS:
        start = f"The {noun} lasted from the year"
        head = _encode(tokenizer, start)
        for cc in CENTURIES:
            end = _encode(tokenizer, f" {cc}")
            corrupt_tail = _year_split(tokenizer, cc, "01")
            for v in yys:
                yy = f"{v:02d}"
                tail = _year_split(tokenizer, cc, yy)
                if tail is None or corrupt_tail is None or len(tail) != len(corrupt_tail):
                    continue
                text = f"{start} {cc}{yy} to the year {cc}"
                bad_text = f"{start} {cc}01 to the year {cc}"
                ids = _encode(tokenizer, text)
                if ids != head + end + tail + middle + end:
                    continue
                bad = _encode(tokenizer, bad_text)
                if bad != head + end + corrupt_tail + middle + end:
                    continue
                if mode == "digit":
                    tens = v // 10
                    correct, wrong = answers[tens + 1 :], answers[:tens]
                else:
                    correct, wrong = answers[v + 1 :], answers[: v + 1]
                cands.append(_Candidate(ids, bad, correct, wrong, {"YY": len(head) + len(end)}, text, bad_text))
    chosen = _select(cands, n, seed, "the greater-than task")
    return _make_task(
        "greater_than",
        chosen,
        "prob_diff",
        bos,
        f"greater-than (Hanna et al. 2023), {mode} years: P(later) - P(earlier); corrupted YY = 01",
    )
