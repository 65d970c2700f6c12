"""The claims of RESULTS.md, each a check over the committed tables it reads, and the tables RESULTS.md prints
from them. The claims live beside the section of RESULTS.md they check, one module each in ``results/checks/``
(``s1_decomposition.py`` .. ``s7_circuits.py``; ``common.py``: the registry and the tables' paths); this file
gathers them.

    .venv/bin/python results/claims.py            # every claim: holds or not, and the numbers that decided it
    .venv/bin/python results/claims.py --table patching-heads   # a generated table's Markdown
    .venv/bin/python results/claims.py --write-tables           # rewrite RESULTS.md's stale generated tables
    .venv/bin/python results/claims.py --counterexamples        # each claim on each of its counterexamples

RESULTS.md cites a claim by its id in a code span inside the sentence it backs (`` `[1.perp-carries]` ``);
``tests/test_claims.py`` evaluates every claim on the committed tables, fails on one they contradict, on an id
cited but not registered (or registered but not cited), on a sentence of a finding that says something
checkable without an id, and on a generated table that differs from what :data:`TABLES` prints now. Each claim
carries ``false_if=`` counterexamples, small edits of its tables that make its sentence false (built with
:func:`tlgeo.report.claims.edit` and its shorthands; ``_head``, ``_rel`` and ``_path`` of ``checks/common.py``
pick the rows of a patching head, a geometries relation and a path); the test fails on a claim without one, or
one that still holds on a counterexample. A sentence marked `` `[interpretation]` `` is a reading of the numbers,
not a finding of the tables.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tlgeo.report.claims import generated_blocks  # noqa: E402

from results.checks import (  # noqa: E402
    s1_decomposition,
    s2_dirmag,
    s3_pdsf,
    s4_tokenwise,
    s5_patching,  # noqa: E402
    s6_geometries,
    s7_circuits,
)
from results.checks.common import CLAIMS, EFFECTS, PAIR, PARTS, PARTS_GEMMA, PDSF, TOKENWISE  # noqa: E402

SECTIONS = (s1_decomposition, s2_dirmag, s3_pdsf, s4_tokenwise, s5_patching, s6_geometries, s7_circuits)  # registered
TABLES = {
    "patching-heads": (s5_patching.patching_heads_table, EFFECTS),
    "pdsf-smollm2": (s3_pdsf.pdsf_table, PDSF),
    "tokenwise": (s4_tokenwise.tokenwise_table, TOKENWISE),
    "dirmag-parts": (s2_dirmag.dirmag_parts_table, PARTS),
    "dirmag-parts-gemma": (s2_dirmag.dirmag_parts_table, PARTS_GEMMA),
    "pretrain-study": (s1_decomposition.pretrain_table, s1_decomposition.STUDY),
    "dirmag-pair": (s2_dirmag.dirmag_pair_table, PAIR["gpt"]),
    "ioi-circuit": (s5_patching.ioi_circuit_table, "results/circuits-smollm2-135m"),
    "zoo-circuits": (s7_circuits.zoo_circuits_table, "results/circuits-zoo"),
}


def table_input(path: str) -> "pd.DataFrame | Path":
    """What a generated table is made from: a CSV read, or a folder as it is."""
    p = ROOT / path
    return p if p.is_dir() else pd.read_csv(p)


def write_tables(doc: Path) -> list[str]:
    """Each generated table of ``doc`` that differs from what :data:`TABLES` prints now, rewritten in place (after a
    rerun replaced its folders); the names of those rewritten."""
    text = doc.read_text()
    stale = {}
    for name, body in generated_blocks(text).items():
        fn, path = TABLES[name]
        if (now := fn(table_input(path))) != body:
            stale[name] = (body, now)
    for body, now in stale.values():
        text = text.replace(body, now, 1)
    doc.write_text(text)
    return list(stale)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", choices=sorted(TABLES), help="print a generated table's Markdown instead")
    ap.add_argument("--write-tables", action="store_true", help="rewrite RESULTS.md's generated tables that are stale")
    ap.add_argument(
        "--counterexamples",
        action="store_true",
        help="evaluate each claim on each of its counterexamples (every one should be False)",
    )
    args = ap.parse_args()
    if args.counterexamples:
        got = CLAIMS.refute(ROOT)
        with pd.option_context("display.max_colwidth", 100, "display.width", 200):
            print(got[["id", "holds", "says"]].to_string(index=False))
        return 1 if got["holds"].any() else 0
    if args.write_tables:
        print("rewritten:", ", ".join(write_tables(ROOT / "RESULTS.md")) or "none")
        return 0
    if args.table:
        fn, path = TABLES[args.table]
        print(fn(table_input(path)))
        return 0
    got = CLAIMS.evaluate(ROOT)
    with pd.option_context("display.max_colwidth", 90, "display.width", 200):
        print(got[["id", "holds", "detail"]].to_string(index=False))
    return 0 if got["holds"].all() else 1


if __name__ == "__main__":
    raise SystemExit(main())
