"""The atlas report's opening block: each chapter's headline, and for a model with random weights the
same sentences without their comparisons with the seed papers (they mean nothing there)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from ..runner.analysis import chapter_headline, chapter_title

__all__ = ["set_headline", "without_paper"]


def _split_top(text: str, sep: str) -> list[str]:
    """``text`` split at each ``sep`` outside parentheses and brackets."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        ch = text[i]
        depth += (ch in "([") - (ch in ")]")
        if depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            start = i = i + len(sep)
            continue
        i += 1
    return parts + [text[start:]]


def _groups_without_paper(text: str) -> str:
    """Each parenthesised group's ``;``-separated parts that name the paper dropped (the whole group where
    every part does); innermost groups first."""
    pattern = re.compile(r" ?\(([^()]*)\)")

    def keep(m: re.Match) -> str:
        parts = [p for p in m.group(1).split("; ") if "paper" not in p.lower()]
        if len(parts) == len(m.group(1).split("; ")):
            return m.group(0).replace("(", "\x00").replace(")", "\x01")  # kept: hidden from the next pass
        return f" \x00{'; '.join(parts)}\x01" if parts else ""

    while True:
        new = pattern.sub(keep, text)
        if new == text:
            return text.replace("\x00", "(").replace("\x01", ")")
        text = new


def without_paper(sentence: str) -> str:
    """``sentence`` without its comparisons with a paper: parenthesised remarks and ``;`` / `` — `` /
    ``, ``-separated clauses that name it, and whole sentences that do; ``""`` when nothing is left."""
    kept = []
    for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", _groups_without_paper(sentence)):
        end = "." if s.rstrip().endswith(".") else ""
        body = s.rstrip().removesuffix(".")
        for sep in ("; ", " — ", ", "):
            parts = _split_top(body, sep)
            body = sep.join(p for i, p in enumerate(parts) if i == 0 or "paper" not in p.lower())
        if "paper" not in body.lower() and body.strip():
            kept.append(body.rstrip(" ,;") + end)
    return " ".join(kept)


def set_headline(
    report, budgets: dict[str, Any], out: Path, chapters: list[str], caveats: list[str] = (), compare: bool = True
) -> None:
    """The report's opening block: each chapter's headline (in ``chapters`` order) from the CSVs in ``out``,
    after ``caveats`` (first among the warnings); ``compare=False`` (a model with random weights) leaves
    out every comparison with a paper.

    A headline that fails is reported in the block (and on stderr) rather than stopping a run whose
    results are already on disk."""
    groups: list[tuple[str, list[str]]] = []
    warnings: list[str] = []
    plain = (lambda s: s) if compare else without_paper
    for chapter in chapters:
        try:
            h = chapter_headline(chapter, out, budgets[chapter])
        except Exception as e:  # noqa: BLE001 - the CSVs are saved; say so, carry on
            print(f"[atlas] headline of {chapter!r} failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            groups.append((chapter_title(chapter), [f"(The headline could not be computed: {type(e).__name__}: {e}.)"]))
            continue
        groups.append((chapter_title(chapter), [t for s in h.sentences if (t := plain(s))]))
        warnings += [t for w in h.warnings if (t := plain(w))]
    report.headline([], warnings, caveats=caveats, groups=groups)
