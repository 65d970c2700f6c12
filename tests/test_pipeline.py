"""The atlas contract: families, their budgets and steps register once, in order, with clear errors."""

from dataclasses import dataclass

import pandas as pd
import pytest

from tlgeo import pipeline
from tlgeo.pipeline import StepContext, budget, make_budgets, register_family, register_step


@pytest.fixture
def empty_registry(monkeypatch):
    monkeypatch.setattr(pipeline, "_FAMILIES", {})
    monkeypatch.setattr(pipeline, "_STEPS", {})


@dataclass
class ToyBudgets:
    tokens: int = budget(16, "tokens")
    grid: tuple[float, ...] = budget((0.0, 1.0), "grid", item=float)


@dataclass
class OtherBudgets:
    samples: int = budget(2, "samples")


def test_registration_order_budgets_and_overrides(empty_registry):
    register_family("toy", ToyBudgets)
    register_family("other", OtherBudgets)

    @register_step("b_step", "toy", ("b",), "second letter first")
    def b_step(ctx):
        pass

    @register_step("a_step", "other", ("a",), "first letter second")
    def a_step(ctx):
        pass

    assert list(pipeline.steps()) == ["b_step", "a_step"]  # registration order, not names
    assert pipeline.steps()["a_step"].family == "other"
    assert pipeline.budget_fields()["grid"][1].metadata["item"] is float
    budgets = make_budgets({"tokens": 4, "samples": 9})
    assert budgets["toy"] == ToyBudgets(tokens=4) and budgets["other"] == OtherBudgets(samples=9)
    with pytest.raises(ValueError, match=r"unknown atlas budget\(s\) \['tokns'\]; known: \['grid', 'samples', 'tokens'\]"):
        make_budgets({"tokns": 4})


def test_registration_errors(empty_registry):
    with pytest.raises(ValueError, match="register the family 'toy' before its steps"):
        register_step("s", "toy", (), "")
    with pytest.raises(TypeError, match="must be a dataclass"):
        register_family("toy", dict)
    register_family("toy", ToyBudgets)
    register_family("toy", ToyBudgets)  # the same class again (a re-import) is fine

    @dataclass
    class Clash:
        tokens: int = 3

    with pytest.raises(ValueError, match=r"budget name\(s\) \['tokens'\] of 'clash' are already used by 'toy'"):
        register_family("clash", Clash)
    with pytest.raises(ValueError, match="already registered"):
        register_family("toy", OtherBudgets)

    register_step("s", "toy", (), "")(lambda ctx: None)
    with pytest.raises(ValueError, match="atlas step 's' is already registered"):
        register_step("s", "toy", (), "")(test_registration_errors)


def test_context_caches_csvs(tmp_path):
    ctx = StepContext(cfg=None, model=None, text="", report=None, budget=ToyBudgets(), out=tmp_path)
    calls = []

    def compute():
        calls.append(1)
        return pd.DataFrame({"x": [1.5, 2.5]})

    first = ctx.cached("table", compute)
    again = ctx.cached("table", compute)
    assert calls == [1] and ctx.csv("table").exists()
    pd.testing.assert_frame_equal(first, again)
    assert ctx.log("steps") == tmp_path / "logs" / "steps.jsonl"
