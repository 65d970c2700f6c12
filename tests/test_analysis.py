"""The analysis contract: results own their tables; atlas chapters, budgets and steps register once, in order, with
clear errors."""

import dataclasses
from dataclasses import dataclass

import pandas as pd
import pytest

from tlgeo.runner import analysis as pipeline  # the module was pipeline.py
from tlgeo.runner.analysis import Headline, budget, make_budgets, register_analysis_step, register_chapter


@pytest.fixture
def empty_registry(monkeypatch):
    monkeypatch.setattr(pipeline, "_CHAPTERS", {})
    monkeypatch.setattr(pipeline, "_STEPS", {})
    monkeypatch.setattr(pipeline, "_HEADLINES", {})


@dataclass
class ToyBudgets:
    tokens: int = budget(16, "tokens")
    grid: tuple[float, ...] = budget((0.0, 1.0), "grid", item=float)


@dataclass
class OtherBudgets:
    samples: int = budget(2, "samples")


def _toy_analysis(name: str):
    """A registered-analysis stand-in (the step registry reads only its result's tables)."""
    from tlgeo.runner.analysis import Analysis, Config, Result, Table

    @dataclass
    class ToyResult(Result):
        TABLES = (Table(name, ("x",), f"{name}.csv.gz"),)

    return Analysis(name, Config, lambda *a, **k: ToyResult(), ToyResult, lambda m, c: [], "toy")


def test_registration_order_budgets_and_overrides(empty_registry):
    register_chapter("toy", ToyBudgets)
    register_chapter("other", OtherBudgets)

    @register_analysis_step("b_step", "toy", _toy_analysis("b"), lambda b: None, "second letter first")
    def b_step(ctx, result):
        pass

    @register_analysis_step("a_step", "other", _toy_analysis("a"), lambda b: None, "first letter second")
    def a_step(ctx, result):
        pass

    assert list(pipeline.steps()) == ["b_step", "a_step"]  # registration order, not names
    assert pipeline.steps()["a_step"].chapter == "other" and pipeline.steps()["a_step"].files == ("a.csv.gz",)
    assert pipeline.budget_fields()["grid"][1].metadata["item"] is float
    budgets = make_budgets({"tokens": 4, "samples": 9})
    assert budgets["toy"] == ToyBudgets(tokens=4) and budgets["other"] == OtherBudgets(samples=9)
    with pytest.raises(
        ValueError, match=r"unknown atlas budget\(s\) \['tokns'\]; known: \['grid', 'samples', 'tokens'\]"
    ):
        make_budgets({"tokns": 4})


def test_registration_errors(empty_registry):
    toy = _toy_analysis("s")
    with pytest.raises(ValueError, match="register the chapter 'toy' before its steps"):
        register_analysis_step("s", "toy", toy, lambda b: None, "")
    with pytest.raises(TypeError, match="must be a dataclass"):
        register_chapter("toy", dict)
    register_chapter("toy", ToyBudgets)
    register_chapter("toy", ToyBudgets)  # the same class again (a re-import) is fine

    @dataclass
    class Clash:
        tokens: int = 3

    with pytest.raises(ValueError, match=r"budget name\(s\) \['tokens'\] of 'clash' are already used by 'toy'"):
        register_chapter("clash", Clash)
    with pytest.raises(ValueError, match="already registered"):
        register_chapter("toy", OtherBudgets)

    register_analysis_step("s", "toy", toy, lambda b: None, "")(lambda ctx, result: None)
    with pytest.raises(ValueError, match="atlas step 's' is already registered"):
        register_analysis_step("s", "toy", toy, lambda b: None, "")(test_registration_errors)


def test_chapter_headline(empty_registry, tmp_path):
    def toy_headline(out, budgets):
        n = int((out / "n.txt").read_text()) if (out / "n.txt").exists() else None
        if n is None:
            return Headline()
        return Headline([f"{n} tokens of {budgets.tokens} done."], ["tiny budget: indication only"] if n < 10 else [])

    register_chapter("toy", ToyBudgets, headline=toy_headline)
    register_chapter("other", OtherBudgets, headline=lambda out, b: [f"{b.samples} samples."])  # a plain list
    register_chapter("toy", ToyBudgets, headline=toy_headline)  # a re-import is fine
    assert list(pipeline.headlines()) == ["toy", "other"]
    assert not pipeline.chapter_headline("toy", tmp_path, ToyBudgets())  # nothing done yet: empty
    (tmp_path / "n.txt").write_text("4")
    h = pipeline.chapter_headline("toy", tmp_path, ToyBudgets())
    assert h.sentences == ["4 tokens of 16 done."] and h.warnings == ["tiny budget: indication only"]
    assert pipeline.chapter_headline("other", tmp_path, OtherBudgets()) == Headline(["2 samples."])
    assert pipeline.chapter_headline("nope", tmp_path, None) == Headline()
    with pytest.raises(ValueError, match="already has a headline"):
        register_chapter("toy", ToyBudgets, headline=test_chapter_headline)
    with pytest.raises(TypeError, match="must be a function"):
        register_chapter("third", OtherBudgets, headline="not callable")
    pipeline._HEADLINES["bad"] = lambda out, b: 3
    pipeline._CHAPTERS["bad"] = OtherBudgets
    with pytest.raises(TypeError, match="must return a Headline or a list of str"):
        pipeline.chapter_headline("bad", tmp_path, None)


def test_budget_cost_metadata():
    f = ToyBudgets.__dataclass_fields__["tokens"]
    assert "cost" not in f.metadata

    @dataclass
    class Costly:
        n: int = budget(3, "items", cost="one forward per item")

    assert Costly.__dataclass_fields__["n"].metadata == {"help": "items", "cost": "one forward per item"}


def test_result_tables_become_fields_and_save_load_merge_by_key(tmp_path):
    from tlgeo.runner.analysis import Result, Table

    @dataclasses.dataclass
    class Toy(Result):
        note: str = ""
        TABLES = (
            Table("rows", ("setting", "unit"), "toy_rows.csv", ("wall_s",)),
            Table("other", ("unit",), "toy_other.csv.gz"),
        )

    assert [f.name for f in dataclasses.fields(Toy)] == ["note", "rows", "other"]
    a = Toy(rows=pd.DataFrame({"setting": ["x", "x"], "unit": [1, 2], "v": [0.5, 0.25], "wall_s": [1.0, 2.0]}))
    b = Toy(rows=pd.DataFrame({"setting": ["x", "y"], "unit": [2, 2], "v": [0.25, 9.0], "wall_s": [3.0, 4.0]}))
    assert set(a.tables()) == {"rows"} and Toy.table("other").filename == "toy_other.csv.gz"
    merged = Toy.merge([a, b]).rows
    assert list(zip(merged.setting, merged.unit)) == [("x", 1), ("x", 2), ("y", 2)]  # (x, 2) kept once, the last
    a.save(tmp_path)
    b.save(tmp_path)  # merged into the CSV by key: other settings kept, the same key replaced
    back = Toy.load(tmp_path)
    assert back.other is None and sorted(zip(back.rows.setting, back.rows.unit)) == [("x", 1), ("x", 2), ("y", 2)]
    assert back.rows.set_index(["setting", "unit"]).loc[("x", 2), "wall_s"] == 3.0
    with pytest.raises(KeyError, match="no table 'nope'"):
        Toy.table("nope")
    with pytest.raises(ValueError, match="nothing to merge"):
        Toy.merge([])


def test_a_run_from_python_records_its_command_line_progress_and_resumes_as_the_command(llama, tmp_path, capsys):
    """``run(model, cfg, out=...)`` from Python writes the provenance line a command would, with the command line
    that makes the same tables (scripts/reproduce.py reruns it), shows progress, and says what it resumed."""
    import json

    from tlgeo.cli import main
    from tlgeo.decomposition.config import PplConfig
    from tlgeo.decomposition.analysis import run_ppl

    cfg = PplConfig(tokens=128, context=64, site="value_excl_self", s_par=0.0)
    run_ppl(llama, cfg, out=tmp_path / "api")
    first = capsys.readouterr()
    lines = [json.loads(x) for x in (tmp_path / "api" / "provenance.jsonl").read_text().splitlines()]
    assert len(lines) == 1 and lines[0]["made_from"] == "python"
    argv = lines[0]["argv"]
    assert argv[:3] == ["ppl", "--model", "tiny:llama"] and argv[-2:] == ["--out", str(tmp_path / "api")]
    assert "%|" in first.err and "provenance:" in first.out  # a progress bar, and where the provenance went
    run_ppl(llama, cfg, out=tmp_path / "api")
    assert f"resumed 2 rows from {tmp_path / 'api' / 'ppl.jsonl'}" in capsys.readouterr().out  # unedited, edited
    assert main([*argv[:-1], str(tmp_path / "cli")]) == 0  # the recorded command line makes the same table
    api = pd.read_csv(tmp_path / "api" / "ppl.csv").drop(columns=["wall_s"], errors="ignore")
    cli = pd.read_csv(tmp_path / "cli" / "ppl.csv").drop(columns=["wall_s"], errors="ignore")
    pd.testing.assert_frame_equal(api, cli)
    assert len((tmp_path / "cli" / "provenance.jsonl").read_text().splitlines()) == 1  # the command's own line only
