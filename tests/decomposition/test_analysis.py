"""The decomposition analyses on the contract: configs checked once, units, results, budgets."""

import dataclasses

import pandas as pd
import pytest

from tlgeo.decomposition.analysis import (
    DecompositionResult,
    PplResult,
    ProfileResult,
    ppl_units,
    run,
    run_ppl,
    run_profile,
    units,
)
from tlgeo.decomposition.config import DecompositionConfig, PplConfig, ProfileConfig


def test_configs_check_their_values():
    with pytest.raises(ValueError, match="sites: unknown site 'nope'"):
        DecompositionConfig(sites=("attn", "nope"))
    with pytest.raises(ValueError, match="tokens: must be an integer >= 0"):
        DecompositionConfig(tokens=-1)
    with pytest.raises(ValueError, match="context: must be an integer >= 1"):
        PplConfig(site="attn", context=0)
    with pytest.raises(ValueError, match="corpus"):
        ProfileConfig(corpus=" ")
    with pytest.raises(ValueError, match="no decomposition to profile"):
        ProfileConfig(sites=("diag",))
    with pytest.raises(ValueError, match="site: required"):
        PplConfig()
    with pytest.raises(ValueError, match="s_par must be finite"):
        PplConfig(site="attn", s_par=float("inf"))
    assert ProfileConfig(sites=["value_excl_self", "attn", "attn"]).sites == ("value_excl_self", "attn")
    for old in ("excl_self", "attn_out", "diagonal"):  # one name per site: the old aliases are refused
        with pytest.raises(ValueError, match=f"unknown site '{old}'; known sites: .*'value_excl_self'"):
            PplConfig(site=old)
    cfg = DecompositionConfig(sites=("attn", "diag"))
    assert cfg.profile_sites() == ("attn",) and [e.describe()["site"] for e in cfg.edits()] == ["attn", "attn", "diag"]
    assert (
        ProfileConfig(tokens=0, seq_len=64, corpus="a/b.txt").per_token_file()
        == "profile_tokens-a_b.txt-tall-s64.csv.gz"
    )


def test_units_name_the_profile_and_each_removal(llama):
    cfg = DecompositionConfig(sites=("attn", "diag"))
    assert units(llama, cfg) == [
        ("profile",),
        ("edit", "attn", "par"),
        ("edit", "attn", "perp"),
        ("edit", "diag", "par"),
    ]
    assert units(llama, DecompositionConfig(sites=("diag",))) == [("edit", "diag", "par")]  # nothing to profile
    assert ppl_units(llama, PplConfig(site="attn")) == [("baseline",), ("edit",)]


def test_run_saves_the_old_files_and_resumes_from_the_log(llama, tmp_path):
    cfg = DecompositionConfig(tokens=100, context=32, profile_tokens=64, profile_seq_len=32, sites=("mlp",))
    seen = []
    res = run(llama, cfg, out=tmp_path / "out", log=tmp_path / "logs", on_table=lambda n, df: seen.append(n))
    assert seen == ["profile_summary", "edits"] and isinstance(res, DecompositionResult)
    assert (tmp_path / "out" / "profile_summary.csv").exists() and (tmp_path / "out" / "edits.csv").exists()
    assert len((tmp_path / "logs" / "edits.jsonl").read_text().splitlines()) == 3  # baseline + par + perp
    assert list(res.edits["site"]) == ["none", "mlp", "mlp"] and (res.edits["corpus"] == "wikitext2").all()
    assert list(res.profile_summary[["max_tokens", "seq_len"]].iloc[0]) == [64, 32]
    only = run(llama, cfg, log=tmp_path / "logs", units=[("edit", "mlp", "perp")])  # from the log
    assert only.profile_summary is None and list(only.edits["s_perp"]) == [1.0, 0.0]
    pd.testing.assert_frame_equal(
        only.edits.iloc[[1]].reset_index(drop=True), res.edits.iloc[[2]].reset_index(drop=True)
    )
    loaded = DecompositionResult.load(tmp_path / "out")
    assert len(loaded.edits) == 3 and len(loaded.profile_summary) == len(res.profile_summary)


def test_profile_and_ppl_runs(llama, tmp_path):
    cfg = ProfileConfig(tokens=64, seq_len=32, sites=("attn", "mlp"), per_token=True)
    part = run_profile(llama, cfg, out=tmp_path, units=[("site", "mlp")])
    whole = run_profile(llama, cfg)
    assert isinstance(part, ProfileResult) and set(part.profile_summary["site"]) == {"mlp"}
    got = pd.read_csv(tmp_path / cfg.per_token_file())  # a part merges into the per-token file
    assert set(got["site"]) == {"mlp"} and len(got) == (whole.per_token["site"] == "mlp").sum()
    ppl = PplConfig(site="attn", s_par=0.0, tokens=64, context=32, layers=(1, 2))
    res = run_ppl(llama, ppl, out=tmp_path)
    assert isinstance(res, PplResult) and list(res.ppl["site"]) == ["none", "attn"]
    assert res.ppl["layers"].iloc[1] == [1, 2]  # as the log stores it: one spelling in the CSV
    assert len(run_ppl(llama, ppl, units=[("edit",)]).ppl) == 1
    with pytest.raises(IndexError, match="out of range"):
        run_ppl(llama, PplConfig(site="attn", tokens=64, context=32, layers=(7,)))


def test_window_too_long_fails_before_the_text_is_read(llama, monkeypatch):
    import tlgeo.decomposition.analysis as a

    monkeypatch.setattr(a, "load_text", lambda name: pytest.fail("read the text"))
    with pytest.raises(ValueError, match="--profile-seq-len 300 exceeds the model's context of 256"):
        run(llama, DecompositionConfig(profile_seq_len=300, context=64))


def test_budgets_keep_their_names_and_defaults():
    from tlgeo.decomposition.atlas import DecompositionBudgets

    fields = {f.name: f for f in dataclasses.fields(DecompositionBudgets)}
    first = ["skip_first", "context", "profile_tokens", "sweep_tokens"]
    assert list(fields)[:4] == [f"decomposition_{n}" for n in first]
    assert all(n.startswith("decomposition_") and "flag" not in f.metadata for n, f in fields.items())
    b = DecompositionBudgets()
    assert (
        b.decomposition_skip_first,
        b.decomposition_context,
        b.decomposition_profile_tokens,
        b.decomposition_sweep_tokens,
    ) == (1, 256, 512, 512)
    cfg = DecompositionBudgets(decomposition_context=64).config(tokens=100)
    assert isinstance(cfg, DecompositionConfig) and (cfg.context, cfg.profile_tokens, cfg.tokens) == (64, 512, 100)
