"""A new family is one module (its ``FAMILY``) and one line in the registry's ``FAMILY_MODULES``:
the registry, the support matrix, the seed checkpoints and the config lookup then know it."""

import dataclasses
import types

import pytest

from tlgeo.families import FAMILIES, FAMILY_MODULES, Support, family_of_config, get_family, layer_paths, markdown_table
from tlgeo.families import support, support_table
from tlgeo.families.architectures import llama
from tlgeo.families.checkpoints import SEED_CHECKPOINTS, SEED_FAMILIES
from tlgeo.families.registry import build
from tlgeo.report.registry import load_analyses

load_analyses()  # the analyses' support columns (each from its record's rule)


def _toy_module() -> types.ModuleType:
    """A family module as a contributor writes it: Llama's traits under a new model_type."""
    toy = types.ModuleType("toyllama")
    toy.FAMILY = dataclasses.replace(
        llama.FAMILY,
        name="toyllama",
        model_type="toyllama",
        checkpoints={
            "example/toyllama-1b": {
                "model_type": "toyllama",
                "hidden_size": 2048,
                "num_hidden_layers": 16,
                "num_attention_heads": 32,
                "vocab_size": 32000,
            }
        },
        layer_path="model.toy_layers",
        support={"compression": Support("no", "toy weights are not mapped")},
        differs="Llama under another name",
    )
    return toy


@pytest.fixture
def toy():
    """The toy module registered for one test; the registry rebuilt from its own modules after."""
    module = _toy_module()
    build(FAMILY_MODULES + (module,))
    try:
        yield module.FAMILY
    finally:
        build()


def test_one_module_and_one_registry_line_make_a_family(toy):
    assert FAMILIES["toyllama"] is toy and get_family("toyllama") is toy
    assert family_of_config({"model_type": "toyllama"}) is toy
    assert SEED_CHECKPOINTS["example/toyllama-1b"]["hidden_size"] == 2048
    assert SEED_FAMILIES["example/toyllama-1b"] == "toyllama" and toy.seed_models == ("example/toyllama-1b",)
    assert "model.toy_layers" in layer_paths()
    row = support_table().loc["toyllama"]
    assert (row.drop("compression") == support_table().loc["llama"].drop("compression")).all()  # the traits' rules
    assert row["compression"] == "no" and support(toy, "compression").why == "toy weights are not mapped"  # its own
    assert (
        "- **toyllama**: Llama under another name. `compression` (refused): toy weights are not mapped"
        in markdown_table()
    )


def test_the_registry_is_its_own_again_after():
    before = markdown_table()
    build(FAMILY_MODULES + (_toy_module(),))
    build()
    assert "toyllama" not in FAMILIES and "example/toyllama-1b" not in SEED_CHECKPOINTS
    assert [f.name for f in FAMILIES.values()] == [m.FAMILY.name for m in FAMILY_MODULES]
    assert markdown_table() == before and family_of_config({"model_type": "toyllama"}) is None


def test_two_modules_of_one_name_are_refused_and_leave_the_registry_as_it_was():
    with pytest.raises(ValueError, match="two family modules declare 'llama'"):
        build(FAMILY_MODULES + (llama,))
    assert list(FAMILIES) == [m.FAMILY.name for m in FAMILY_MODULES]
    assert set(SEED_CHECKPOINTS) == {h for m in FAMILY_MODULES for h in m.FAMILY.checkpoints}
