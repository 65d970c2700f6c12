"""ARCHITECTURE.md's table of names (its "Names" section) against the registries: every cell is what the code says,
every analysis record, command, atlas step and command-made results folder has its row, so the table cannot drift."""

from __future__ import annotations

import dataclasses
import importlib
import json
import pkgutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = [
    "concept",
    "package",
    "command(s)",
    "config",
    "atlas step",
    "atlas chapter",
    "atlas flags",
    "results folders",
    "docs page",
    "why two names",
]


def names_table(text: str) -> list[dict[str, list[str]]]:
    """The rows of the table under ``## Names``: each cell a list of its entries (backticks dropped; "—": none)."""
    section = text.split("\n## Names\n", 1)[1].split("\n## ", 1)[0]
    lines = [l for l in section.splitlines() if l.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == COLUMNS, header
    rows = []
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == len(COLUMNS), line
        rows.append(
            {
                col: []
                if cell == "—"
                else [x.strip().strip("`") for x in cell.split(", ")]
                if col != COLUMNS[-1]
                else [cell]
                for col, cell in zip(COLUMNS, cells)
            }
        )
    return rows


@pytest.fixture(scope="module")
def table():
    return names_table((ROOT / "ARCHITECTURE.md").read_text())


@pytest.fixture(scope="module")
def registries():
    from tlgeo.cli import _commands, build_parser
    from tlgeo.report.registry import load_analyses, load_steps
    from tlgeo.runner.analysis import budget_fields

    steps = load_steps()
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "cmd")
    return dict(
        analyses=load_analyses(), steps=steps, commands=_commands(), parsed=set(sub.choices), budgets=budget_fields()
    )


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _classes(package: str) -> dict[str, type]:
    """Every dataclass defined in ``package``'s modules, by name."""
    pkg = importlib.import_module(package)
    mods = [pkg] + [importlib.import_module(m.name) for m in pkgutil.walk_packages(pkg.__path__, package + ".")]
    return {n: c for m in mods for n, c in vars(m).items() if isinstance(c, type) and dataclasses.is_dataclass(c)}


def _made_by(folder: Path) -> set[str]:
    """The first argv word of every provenance line in ``folder`` and its subfolders one level down."""
    out = set()
    for p in [folder / "provenance.jsonl", *folder.glob("*/provenance.jsonl")]:
        lines = p.read_text().splitlines() if p.exists() else []
        out |= {(json.loads(line).get("argv") or [""])[0] for line in lines if line.strip()}
    return out - {""}


def test_the_table_parses_and_names_each_concept_once(table):
    concepts = [r["concept"][0] for r in table]
    assert len(concepts) == len(set(concepts)) and len(concepts) >= 20, concepts


def check_records(table, registries) -> None:
    rows = {r["concept"][0]: r for r in table}
    for name, a in registries["analyses"].items():
        assert name in rows, f"analysis record {name!r} has no row in ARCHITECTURE.md's Names"
        row = rows[name]
        assert row["package"] == [_package(a.run.__module__)], name
        assert row["command(s)"][0] == a.command_name, name
        assert row["config"][0] == a.config.__name__, name
        assert row["docs page"] == [f"docs/{a.docs}.md"], name
        steps = [s for s, st in registries["steps"].items() if st.analysis.name == name]
        assert row["atlas step"] == steps, name


def test_every_analysis_record_is_a_row_with_its_own_names(table, registries):
    check_records(table, registries)


def test_every_command_of_the_parser_is_in_exactly_one_row(table, registries):
    named = [c for r in table for c in r["command(s)"]]
    assert sorted(named) == sorted(registries["parsed"]) == sorted(registries["commands"])
    for r in table:
        for c in r["command(s)"]:
            module = registries["commands"][c].run.__module__
            if module != "tlgeo.cli":  # the dispatcher's own two: sites and models
                assert module.startswith(r["package"][0] + "."), (c, module, r["package"])
        importlib.import_module(r["package"][0])


def test_configs_are_the_packages_own(table):
    for r in table:
        if r["config"]:
            own = _classes(r["package"][0])
            for name in r["config"]:
                assert name in own, f"{r['concept'][0]}: {name} is no dataclass of {r['package'][0]}"


def test_atlas_steps_chapters_and_flags(table, registries):
    steps, budgets = registries["steps"], registries["budgets"]
    listed = [s for r in table for s in r["atlas step"] if s != "(all)"]
    assert sorted(listed) == sorted(steps), "every atlas step in one row"
    for r in table:
        if r["atlas step"] == ["(all)"]:
            assert r["concept"] == ["atlas"]
            continue
        chapters = sorted(
            {st.chapter for st in steps.values() if _package(st.analysis.run.__module__) == r["package"][0]}
        )
        assert r["atlas chapter"] == chapters, r["concept"]
        assert r["atlas flags"] == [f"--{c}-*" for c in chapters], r["concept"]
        for chapter in chapters:  # every budget of the chapter is --<chapter>-<field>
            mine = [n for n, (chap, _) in budgets.items() if chap == chapter]
            assert mine and all(n.startswith(chapter + "_") for n in mine), (chapter, mine)


def test_docs_pages_exist(table):
    for r in table:
        assert r["docs page"] and (ROOT / r["docs page"][0]).is_file(), r["concept"]


def test_results_folders_exist_and_every_command_made_folder_is_listed_with_its_command(table, registries):
    results = ROOT / "results"
    owner: dict[str, str] = {}
    for r in table:
        for pattern in r["results folders"]:
            assert pattern.startswith("results/") and pattern.endswith("/"), pattern
            found = sorted(p for p in ROOT.glob(pattern.rstrip("/")) if p.is_dir())
            assert found, f"{r['concept'][0]}: no folder {pattern}"
            for folder in found:
                assert owner.setdefault(folder.name, r["concept"][0]) == r["concept"][0], f"{folder.name} in two rows"
                made = _made_by(folder) & set(registries["commands"])
                assert made <= set(r["command(s)"]), f"{folder.name} was made by {made}, not {r['command(s)']}"
    for folder in sorted(p for p in results.iterdir() if p.is_dir()):
        if _made_by(folder) & set(registries["commands"]):
            assert folder.name in owner, f"results/{folder.name}/ (made by a tlgeo command) has no row"


def test_a_drifted_row_fails(registries):
    """The checks can fail: a command renamed in the table, or a config of another record, is refused."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    row = "| `circuits` | `tlgeo.circuits` | `circuit` | `CircuitConfig` |"
    assert row in text
    for drifted in (
        "| `circuits` | `tlgeo.circuits` | `circuits` | `CircuitConfig` |",
        "| `circuits` | `tlgeo.circuits` | `circuit` | `PatchingConfig` |",
        "| `circuits` | `tlgeo.patching` | `circuit` | `CircuitConfig` |",
    ):
        with pytest.raises(AssertionError):
            check_records(names_table(text.replace(row, drifted)), registries)
    with pytest.raises(AssertionError):
        names_table(text.replace("| atlas flags |", "| flags |"))
