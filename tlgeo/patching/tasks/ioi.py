"""Indirect object identification (Wang et al. 2022): 16 templates in the IOI paper's style, ABBA and BABA,
single-token names of the tokenizer; the corrupted prompt names three other people."""

from __future__ import annotations

import random
from typing import Mapping

from .base import Task, TaskError, _Candidate, _check_n, _encode, _make_task, _select


# ---------------------------------------------------------------------------------------------
# IOI (Wang et al. 2022)

# {N1} and {N2} are the two names of the first clause, {S2} the repeated subject; each base
# template gives an ABBA order (N1 = IO, N2 = S) and a BABA order (N1 = S, N2 = IO).
_IOI_BASE: tuple[str, ...] = (
    "Then, {N1} and {N2} went to the {PLACE}. {S2} gave a {OBJECT} to",
    "When {N1} and {N2} got a {OBJECT} at the {PLACE}, {S2} decided to give it to",
    "After {N1} and {N2} went to the {PLACE}, {S2} gave a {OBJECT} to",
    "While {N1} and {N2} were working at the {PLACE}, {S2} gave a {OBJECT} to",
    "Then, {N1} and {N2} had a long argument at the {PLACE}. Afterwards {S2} said to",
    "When {N1} and {N2} arrived at the {PLACE}, {S2} handed the {OBJECT} to",
    "After the lunch, {N1} and {N2} went to the {PLACE}. {S2} gave a {OBJECT} to",
    "The {PLACE} was quiet when {N1} and {N2} came in. {S2} passed the {OBJECT} to",
)
IOI_TEMPLATES: tuple[str, ...] = tuple(
    t.replace("{N1}", a).replace("{N2}", b) for t in _IOI_BASE for a, b in (("{IO}", "{S}"), ("{S}", "{IO}"))
)  # 16 templates: ABBA and BABA of each base
NAMES: tuple[str, ...] = (
    "Mary",
    "John",
    "James",
    "Michael",
    "Robert",
    "David",
    "William",
    "Richard",
    "Joseph",
    "Thomas",
    "Charles",
    "Daniel",
    "Matthew",
    "Anthony",
    "Mark",
    "Paul",
    "Steven",
    "Andrew",
    "Kevin",
    "Brian",
    "George",
    "Edward",
    "Jason",
    "Ryan",
    "Jacob",
    "Gary",
    "Eric",
    "Scott",
    "Frank",
    "Patrick",
    "Peter",
    "Sam",
    "Tom",
    "Alex",
    "Ben",
    "Jack",
    "Henry",
    "Elizabeth",
    "Sarah",
    "Jessica",
    "Karen",
    "Nancy",
    "Lisa",
    "Betty",
    "Sandra",
    "Ashley",
    "Emily",
    "Michelle",
    "Laura",
    "Rachel",
    "Anna",
    "Kate",
    "Rose",
    "Alice",
    "Grace",
    "Amy",
    "Helen",
    "Emma",
    "Lucy",
    "Julia",
)
PLACES: tuple[str, ...] = ("store", "garden", "restaurant", "school", "hospital", "office", "station", "park")
OBJECTS: tuple[str, ...] = ("drink", "book", "ring", "basketball", "computer", "necklace", "snack", "bone")


def _single_token_names(tokenizer) -> dict[str, int]:
    out = {}
    for name in NAMES:
        ids = _encode(tokenizer, " " + name)
        if len(ids) == 1:
            out[name] = ids[0]
    return out


def ioi_task(tokenizer, *, n: int, seed: int = 0, bos: int | None = None) -> Task:
    """Indirect object identification: ``"... {S} gave a {OBJECT} to"`` -> ``" {IO}"`` rather than ``" {S}"``.

    Clean prompts fill one of :data:`IOI_TEMPLATES` (ABBA and BABA orders) with two single-token
    names (IO and S, S twice), a place and an object. The corrupted ("ABC") prompt is the same
    template with three other names A', B', C, all different from each other and from IO and S:
    IO -> A', S1 -> B', S2 -> C, so no name repeats. ``correct`` = the IO token, ``wrong`` = the S
    token (``[n, 1]``); metric ``logit_diff``; positions ``"IO"``, ``"S1"``, ``"S2"`` (clean name
    tokens, after BOS) and ``"end"``. Candidates whose names do not stay single aligned tokens in
    context are dropped; the rest are grouped by token length and the first ``n`` of the largest
    group (ties: the shorter) in a seeded order are kept: fewer rows than ``n`` only if fewer exist,
    :class:`TaskError` if fewer than 2, or fewer than 5 single-token names.
    """
    _check_n(n)
    names = _single_token_names(tokenizer)
    if len(names) < 5:
        raise TaskError(
            f"only {len(names)} single-token names in this tokenizer: the IOI task needs at least 5 "
            f"(IO, S and three others for the corrupted prompt); got {sorted(names)}"
        )
    rng = random.Random(seed)
    pool = sorted(names)
    seen: set[str] = set()
    cands: list[_Candidate] = []
    for _ in range(16 * n + 256):
        template = rng.choice(IOI_TEMPLATES)
        io, s, a2, b2, c2 = rng.sample(pool, 5)
        place, obj = rng.choice(PLACES), rng.choice(OBJECTS)

        def fill(io_name: str, s1: str, s2: str) -> str:
            return template.format(IO=io_name, S=s1, S2=s2, PLACE=place, OBJECT=obj)

        text = fill(io, s, s)
        if text in seen:
            continue
        seen.add(text)
        cand = _ioi_candidate(tokenizer, text, fill(a2, b2, c2), names, (io, s), (a2, b2, c2))
        if cand is not None:
            cands.append(cand)
    chosen = _select(cands, n, seed, "the IOI task")
    return _make_task(
        "ioi",
        chosen,
        "logit_diff",
        bos,
        "indirect object identification (Wang et al. 2022): IO vs S name; ABC corruption",
    )


def _ioi_candidate(
    tokenizer,
    text: str,
    corrupted_text: str,
    names: Mapping[str, int],
    clean_names: tuple[str, str],
    abc: tuple[str, str, str],
) -> _Candidate | None:
    ids = _encode(tokenizer, text)
    io_id, s_id = names[clean_names[0]], names[clean_names[1]]
    io_at = [i for i, t in enumerate(ids) if t == io_id]
    s_at = [i for i, t in enumerate(ids) if t == s_id]
    if len(io_at) != 1 or len(s_at) != 2:
        return None
    expected = list(ids)
    for at, name in zip((io_at[0], s_at[0], s_at[1]), abc):
        expected[at] = names[name]
    if _encode(tokenizer, corrupted_text) != expected:
        return None
    return _Candidate(
        ids, expected, [io_id], [s_id], {"IO": io_at[0], "S1": s_at[0], "S2": s_at[1]}, text, corrupted_text
    )
