"""scripts/paper_recipes.py: every recipe is a command tlgeo accepts, on models the planner knows."""

import pytest

from tlgeo.cli import build_parser
from tlgeo.families.checkpoints import SEED_CHECKPOINTS
from tlgeo.planner import model_shape

from .scripts import load_script

recipes = load_script("paper_recipes")


@pytest.mark.parametrize("name", list(recipes.RECIPES))
def test_each_recipe_parses_and_its_models_are_known(name):
    parser = build_parser()
    for model in recipes.RECIPES[name][1]:
        args = parser.parse_args(recipes.argv_of(name, model))  # a flag that drifted fails here
        assert args.cmd == recipes.RECIPES[name][2][0] and args.model == model
        assert model in SEED_CHECKPOINTS and model_shape(model).n_layers  # the planner's shapes: planned offline


def test_printing_plans_and_lists_every_command(capsys):
    assert recipes.main(["--device", "h200"]) == 0
    out = capsys.readouterr().out
    n_models = sum(len(models) for _, models, _ in recipes.RECIPES.values())
    assert out.count("python -m tlgeo ") == n_models
    assert out.count("on one h200") == n_models  # every recipe's command is planned, with its own flags
