"""The family registry, the support matrix and where a user reads it (the command line, the docs)."""

import re
from pathlib import Path

import pytest

from tlgeo.cli import main
from tlgeo.families import (
    FAMILIES,
    SITE_COLUMNS,
    UnknownFamilyError,
    check_support,
    family_of,
    family_of_config,
    get_family,
    markdown_table,
    support,
    support_table,
)
from tlgeo.report.registry import support_columns
from tlgeo.models import TINY_KINDS, UnknownModelError, model_family, tiny_config

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_tiny_model_is_found_as_its_family(family_model, family):
    """From the booted bridge (its HF config) and from the config alone; post-LN OPT apart from OPT."""
    assert family_of(family_model(family)) is FAMILIES[family]
    assert family_of_config(tiny_config(family)) is FAMILIES[family]
    assert family_of_config(tiny_config(family).to_dict()) is FAMILIES[family]


def test_names_and_refusals_of_unknown_things():
    assert set(FAMILIES) == set(TINY_KINDS) and get_family("gpt_neox") is FAMILIES["gpt_neox"]
    for old in ("neox", "pythia", "gemma3_text", "gptoss"):  # one name per family: no aliases
        with pytest.raises(UnknownFamilyError, match=f"unknown model family '{old}'; known families: .*gpt_neox"):
            get_family(old)
    assert family_of_config({"model_type": "gemma3_text"}) is FAMILIES["gemma3"]  # a model_type is matched
    with pytest.raises(UnknownFamilyError, match="known families: llama, qwen2"):
        get_family("gpt5")
    with pytest.raises(UnknownModelError, match="unknown tiny model kind 'gpt5'"):
        tiny_config("gpt5")
    with pytest.raises(KeyError, match="unknown support column 'nope'"):
        support("llama", "nope")
    assert family_of_config({"model_type": "t5"}) is None

    class Unknown:  # a model of no known family runs unchecked
        original_model = type("HF", (), {"config": {"model_type": "t5"}})()

    check_support(Unknown(), *support_columns())


def test_the_matrix_follows_the_traits():
    columns = support_columns()  # the sites', then the analyses' own (each from its record), in report order
    assert columns[: len(SITE_COLUMNS)] == SITE_COLUMNS
    assert columns[len(SITE_COLUMNS) :] == ("dirmag", "tokenwise", "pdsf", "patching", "compression", "train")
    t = support_table(cols=columns)
    assert list(t.index) == list(FAMILIES) and list(t.columns) == list(columns)
    assert set(t.loc["mamba"][["attn", "mlp", "value_full", "value_excl_self", "diag", "patching"]]) == {"no"}
    assert t.loc["mamba", "block"] == "yes*" and t.loc["mamba", "pdsf"] == "yes"
    assert t.loc["llama"].drop("train").eq("yes").all()
    for f in FAMILIES.values():  # every difference and refusal carries its reason
        for c in columns:
            s = support(f, c)
            assert (s.status == "yes") == (s.why == ""), (f.name, c)
    assert "a norm follows W_O" in support("gemma2", "patching").why
    assert "sink" in support("gpt_oss", "value_excl_self").why


def test_models_support_command(capsys):
    assert main(["models", "--support"]) == 0
    out = capsys.readouterr().out
    assert all(re.search(rf"^{f}\s", out, re.M) for f in FAMILIES) and "value_excl_self" in out
    assert main(["models", "--support", "tiny:mamba"]) == 0
    out = capsys.readouterr().out
    assert "family mamba" in out and "value-space sites need attention weights: mamba has none" in out
    assert main(["models", "--support", "nowhere/at-all-xyz"]) == 2
    assert "not a family" in capsys.readouterr().err


def test_model_family_reads_a_local_config(tmp_path):
    import json

    (tmp_path / "config.json").write_text(json.dumps(tiny_config("opt_post_ln").to_dict()))
    assert model_family(str(tmp_path))[0] is FAMILIES["opt_post_ln"]
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "t5"}))
    assert model_family(str(tmp_path)) == (None, "model_type 't5'")


def test_the_docs_matrix_is_the_generated_one():
    """The docs' support matrix is the registry's (the docs build writes it; tests/test_docs.py checks it is
    committed as built), not a table kept by hand."""
    assert markdown_table(support_columns()) in (README.parent / "docs" / "_generated" / "support.md").read_text()
