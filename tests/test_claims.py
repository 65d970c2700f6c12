"""RESULTS.md's sentences as checks: every claim holds on the committed tables, every finding cites one, and
the generated tables are what their script prints now (results/claims.py, tlgeo.report.claims)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pandas as pd
import pytest

from tlgeo.report.claims import (
    CITE,
    Claims,
    Counterexample,
    Verdict,
    both,
    cited,
    differs,
    edit,
    generated_blocks,
    insignificant,
    no_longer_differs,
    scale,
    shift,
    uncited_findings,
)

from .test_docs_numbers import DOCS as DOC_PAGES

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "RESULTS.md"
INTERPRETATION = "interpretation"


def _results_claims():
    spec = importlib.util.spec_from_file_location("results_claims", ROOT / "results" / "claims.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


RC = _results_claims()
VERDICTS = RC.CLAIMS.evaluate(ROOT)
REFUTED = RC.CLAIMS.refute(ROOT)  # each claim on each of its counterexamples


@pytest.mark.parametrize("cid", list(RC.CLAIMS.by_id))
def test_every_claim_holds_on_the_committed_tables(cid):
    row = VERDICTS.set_index("id").loc[cid]
    assert row["holds"], f"claim {cid} is contradicted by its tables ({row['detail']}): {row['sentence']}"


@pytest.mark.parametrize("cid", list(RC.CLAIMS.by_id))
def test_every_claim_is_false_on_each_of_its_counterexamples(cid):
    """A claim that its tables could not contradict checks nothing: each carries at least one small edit of its
    tables that makes its sentence false, and evaluates false on every one."""
    rows = REFUTED[REFUTED["id"] == cid]
    assert len(rows), f"claim {cid} has no counterexample (false_if=...)"
    still = rows[rows["holds"]]
    assert still.empty, f"claim {cid} still holds on: {still['says'].tolist()}"


def test_results_cites_every_claim_and_only_registered_ones():
    text = DOC.read_text()
    ids = set(cited(text)) - {INTERPRETATION}
    assert ids - set(RC.CLAIMS.by_id) == set(), "cited but not registered in results/claims.py"
    assert set(RC.CLAIMS.by_id) - ids == set(), "registered but cited nowhere in RESULTS.md"


def test_the_docs_cite_only_registered_claims():
    """A docs page points to a finding by its claim id; the id must be one RESULTS.md's checks register."""
    unknown = {
        f"{p.relative_to(ROOT)}: {i}"
        for p in sorted((ROOT / "docs").rglob("*.md"))
        for i in set(cited(p.read_text())) - {INTERPRETATION}
        if i not in RC.CLAIMS.by_id
    }
    assert not unknown, f"claim ids cited in the docs but not registered: {sorted(unknown)}"


def _sections_with_tables(text: str) -> list[tuple[str, str]]:
    parts = re.split(r"^(## .*)$", text, flags=re.M)
    return [(parts[i].strip(), parts[i + 1]) for i in range(1, len(parts) - 1, 2) if "<!-- source:" in parts[i + 1]]


DOCS = [DOC, *DOC_PAGES]


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_finding_of_results_and_the_docs_cites_a_claim(page):
    """In each section that quotes tables, of RESULTS.md or of a docs page, each sentence of a finding (a bullet, a
    paragraph that opens in bold) that says something checkable cites a claim or is marked as an interpretation."""
    missing = [
        f"{head}: {sentence}"
        for head, body in _sections_with_tables(page.read_text())
        for sentence in uncited_findings(body)
    ]
    assert not missing, "sentences without a claim id:\n" + "\n".join(missing)


def test_generated_tables_are_what_their_script_prints_now():
    blocks = generated_blocks(DOC.read_text())
    assert set(blocks) == set(RC.TABLES)
    for name, (fn, path) in RC.TABLES.items():
        assert blocks[name] == fn(RC.table_input(path)), (
            f"RESULTS.md's {name} table is stale (`python results/claims.py --write-tables` rewrites it)"
        )


def test_write_tables_rewrites_the_stale_tables_only(tmp_path, monkeypatch):
    """After a rerun, ``--write-tables`` puts what each table's function prints now in place of a stale block and
    leaves the current blocks and the prose around them alone."""
    tables = {
        "a": (lambda t: "| x |\n|---|\n| 2 |", "results/run-smollm2-135m"),
        "b": (lambda t: "| y |\n|---|\n| 1 |", "results/run-smollm2-135m"),
    }
    monkeypatch.setattr(RC, "TABLES", tables)
    doc = tmp_path / "R.md"
    doc.write_text(
        "x went up.\n<!-- table: a -->\n| x |\n|---|\n| 1 |\n<!-- /table -->\nthen\n"
        "<!-- table: b -->\n| y |\n|---|\n| 1 |\n<!-- /table -->\n"
    )
    assert RC.write_tables(doc) == ["a"]
    assert doc.read_text() == (
        "x went up.\n<!-- table: a -->\n| x |\n|---|\n| 2 |\n<!-- /table -->\nthen\n"
        "<!-- table: b -->\n| y |\n|---|\n| 1 |\n<!-- /table -->\n"
    )
    assert RC.write_tables(doc) == [] and generated_blocks(doc.read_text())["a"].endswith("| 2 |")


# -- the machinery, on documents and tables made here -------------------------------------------------------


def test_a_claim_its_table_contradicts_is_reported_false(tmp_path):
    pd.DataFrame({"site": ["a", "b"], "ppl": [10.0, 30.0]}).to_csv(tmp_path / "t.csv", index=False)
    claims = Claims()

    @claims.claim("1.b-worse", "b costs more than a.", "t.csv")
    def _(t):
        return t.set_index("site").loc["b", "ppl"] > t.set_index("site").loc["a", "ppl"]

    @claims.claim("1.a-worse", "a costs more than b.", "t.csv")
    def _(t):
        a, b = t.set_index("site")["ppl"]
        return Verdict(a > b, f"{a=} {b=}")

    got = claims.evaluate(tmp_path).set_index("id")
    assert got.loc["1.b-worse", "holds"] and not got.loc["1.a-worse", "holds"]
    assert got.loc["1.a-worse", "detail"] == "a=10.0 b=30.0"
    with pytest.raises(ValueError, match="registered twice"):
        claims.claim("1.a-worse", "again", "t.csv")(lambda t: True)
    with pytest.raises(ValueError, match="must look like"):
        claims.claim("No Section", "bad id", "t.csv")


def test_uncited_findings_are_the_checkable_sentences_of_bullets_and_bold_paragraphs():
    text = """Method: we ran 3 seeds on every block.

- **Bigger hurts more.** The angle does more damage `[2.a]`. It is twice the magnitude at δ = 5.
  The model was loaded from disk.
- Heads agree on both samples `[interpretation]`.

**Counts.** 40 of 660 rows pass.

| a | 1.5 |
"""
    assert uncited_findings(text) == ["It is twice the magnitude at δ = 5.", "**Counts.** 40 of 660 rows pass."]
    assert cited(text) == ["2.a", "interpretation"] and CITE.pattern


def test_a_counterexample_edits_a_copy_of_the_picked_rows_only():
    t = pd.DataFrame(
        {
            "site": ["a", "b", "b"],
            "n": [1, 2, 3],
            "ci_low": [0.1, 0.2, -0.3],
            "ci_high": [0.4, 0.5, -0.1],
            "q": [0.01, 0.02, 0.03],
        }
    )
    (got,) = edit({"site": "b", "n": 3}, n=lambda x: x * 10).apply([t])
    assert got["n"].tolist() == [1, 2, 30] and t["n"].tolist() == [1, 2, 3]
    (got,) = edit({"site": ["a", "b"]}, n=0.5).apply([t])  # a float into an int column
    assert got["n"].tolist() == [0.5, 0.5, 0.5]
    (got,) = scale(lambda d: d["n"] > 1, "ci_high", 2.0).apply([t])
    assert got["ci_high"].tolist() == [0.4, 1.0, -0.2]
    (got,) = shift(None, "n", 1).apply([t])
    assert got["n"].tolist() == [2, 3, 4]
    (got,) = no_longer_differs({"site": "b"}).apply([t])
    assert ((got["ci_low"] < 0) & (got["ci_high"] > 0)).tolist() == [False, True, True]
    (got,) = insignificant({"n": 1}).apply([t])
    assert got["q"].tolist() == [0.2, 0.02, 0.03]
    other = t.assign(n=0)
    a, b = both(shift({"n": 1}, "n", 5), edit(None, table=1, n=9), says="two edits").apply([t, other])
    assert a["n"].tolist() == [6, 2, 3] and b["n"].tolist() == [9, 9, 9]
    with pytest.raises(ValueError, match="picks no row"):
        edit({"site": "z"}, n=1).apply([t])
    with pytest.raises(ValueError, match="no column 'size'"):
        edit({"site": "a"}, size=1).apply([t])


def test_refute_reports_a_claim_its_counterexample_leaves_true(tmp_path):
    pd.DataFrame({"site": ["a", "b"], "ppl": [10.0, 30.0]}).to_csv(tmp_path / "t.csv", index=False)
    claims = Claims()

    @claims.claim(
        "1.b-worse",
        "b costs more than a.",
        "t.csv",
        false_if=[
            edit({"site": "a"}, ppl=40.0, says="a costs 40"),
            edit({"site": "b"}, ppl=20.0, says="b costs 20: still more than a"),
        ],
    )
    def _(t):
        return t.set_index("site").loc["b", "ppl"] > t.set_index("site").loc["a", "ppl"]

    got = claims.refute(tmp_path)
    assert got["says"].tolist() == ["a costs 40", "b costs 20: still more than a"]
    assert got["holds"].tolist() == [False, True]
    assert claims.evaluate(tmp_path)["holds"].tolist() == [True]  # the edits touched copies
    with pytest.raises(ValueError, match="false_if takes"):
        claims.claim("1.c", "c.", "t.csv", false_if=[lambda t: t])
    assert isinstance(edit(None, n=1), Counterexample)


def test_differs_needs_the_ci_and_the_q():
    assert differs({"ci_low": 0.1, "ci_high": 0.3, "q": 0.01})
    assert not differs({"ci_low": 0.1, "ci_high": 0.3, "q": 0.2})  # L24H4 on seed 0: CI off 0, q 0.305
    assert not differs({"ci_low": -0.1, "ci_high": 0.3, "q": 0.001})
    assert differs({"ci_low": -0.3, "ci_high": -0.1, "p": 0.02})  # no q: the p
