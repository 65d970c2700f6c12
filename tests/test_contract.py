"""The analysis contract, for every registered analysis (tlgeo.runner.analysis; ARCHITECTURE.md).

Each analysis has a config, runs on a tiny model, returns a result whose ``save`` / ``load``
round-trips, whose work units split and merged equal the whole, and whose command exists
with ``--help`` showing its defaults."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from tlgeo.runner.analysis import Config, Result
from tlgeo.report.registry import load_analyses, load_commands

ANALYSES = load_analyses()


def _comparable(df: pd.DataFrame, table) -> pd.DataFrame:
    """Rows sorted by key, volatile columns and the placement (whole or sharded: what the runs compared
    differ in) dropped, lists and tuples as JSON text (as in a CSV). The rest of the identity stays: a
    sharded model's weights fingerprint is the whole one's."""
    df = df.drop(columns=[c for c in (*table.volatile, "placement") if c in df.columns]).copy()
    for c in df.columns:
        if df[c].map(lambda v: isinstance(v, (list, tuple, np.ndarray))).any():
            df[c] = df[c].map(lambda v: json.dumps(list(v)) if isinstance(v, (list, tuple, np.ndarray)) else v)
    key = [k for k in table.key if k in df.columns]
    return df.sort_values(key).reset_index(drop=True)[sorted(df.columns)] if key else df


def _assert_same(a: Result, b: Result, *, via_csv: bool = False, tmp=None, rtol: float = 1e-5) -> None:
    ta, tb = a.tables(), b.tables()
    assert set(ta) == set(tb)
    for name in ta:
        t = type(a).table(name)
        x, y = _comparable(ta[name], t), _comparable(tb[name], t)
        if via_csv:  # a CSV round trip stores every value as text: compare both that way
            x.to_csv(tmp / "x.csv", index=False)
            y.to_csv(tmp / "y.csv", index=False)
            x, y = pd.read_csv(tmp / "x.csv"), pd.read_csv(tmp / "y.csv")
        pd.testing.assert_frame_equal(x, y, check_dtype=False, rtol=rtol, atol=1e-7, obj=name)


@pytest.fixture
def runs(tiny_runs):
    """Each analysis run once whole on its tiny config (shared with the data-parallel test)."""
    return tiny_runs


def _whole(runs, name):
    cfg, res, _ = runs(name)
    return cfg, res


@pytest.mark.parametrize("name", list(ANALYSES))
def test_config_is_frozen_and_checked(name):
    a = ANALYSES[name]
    assert dataclasses.is_dataclass(a.config) and issubclass(a.config, Config)
    cfg = a.config(**a.tiny)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(cfg, dataclasses.fields(cfg)[0].name, None)
    assert a.tiny, f"{name} registers no tiny config"


@pytest.mark.parametrize("name", list(ANALYSES))
def test_save_load_round_trip(name, llama, runs, tmp_path):
    a = ANALYSES[name]
    cfg, res = _whole(runs, name)
    assert isinstance(res, a.result) and res.tables(), f"{name} returned no table"
    written = res.save(tmp_path)
    assert written and all(p.exists() for p in written)
    _assert_same(res, a.result.load(tmp_path), via_csv=True, tmp=tmp_path)
    res.save(tmp_path)  # saving the same rows again replaces them, keeps one copy
    assert {n: len(df) for n, df in a.result.load(tmp_path).tables().items()} == {
        n: len(df) for n, df in res.tables().items()
    }


@pytest.mark.parametrize("name", list(ANALYSES))
def test_units_split_and_merge_equal_the_whole(name, llama, runs):
    a = ANALYSES[name]
    cfg, whole = _whole(runs, name)
    units = a.units(llama, cfg)
    assert len(units) >= 2, f"{name}: the tiny config must have several units to split"
    parts = [a.run(llama, cfg, units=units[i::2]) for i in range(2)]
    # a part batches fewer conditions per forward than the whole: float32 sums in another order, and a ratio
    # (patching's effect over the clean - corrupted gap) shows it at 1e-5 on some CPUs (an AVX-512 VM, 2026-12-05)
    _assert_same(a.result.merge(parts), whole, rtol=1e-4)


def test_every_analysis_has_a_command_with_defaults_in_help(capsys):
    from tlgeo.cli import main

    commands = load_commands()
    for name, a in ANALYSES.items():
        assert a.command_name in commands, f"analysis {name} has no tlgeo command {a.command_name!r}"
        with pytest.raises(SystemExit):
            main([a.command_name, "--help"])
        text = capsys.readouterr().out
        assert "(default:" in text and "--model" in text


@pytest.fixture(scope="module")
def second_models():
    """What a rerun into the first run's folder may differ by: another model (same name, other
    weights) or the same weights in bfloat16."""
    import torch

    from tlgeo.models import tiny_model

    return {"model": tiny_model("llama", seed=1), "dtype": tiny_model("llama", dtype=torch.bfloat16)}


@pytest.mark.parametrize("other", ["model", "dtype"])
@pytest.mark.parametrize("name", list(ANALYSES))
def test_a_rerun_of_another_identity_into_the_folder_gets_its_fresh_numbers(name, other, runs, second_models, tmp_path):
    import shutil

    import torch

    from tlgeo.runner.identity import run_identity
    from tlgeo.runner.results import IDENTITY, run_state

    a, model = ANALYSES[name], second_models[other]
    cfg, first, folder = runs(name)
    shared = tmp_path / "shared"
    shutil.copytree(folder, shared)  # the first model's logs, CSVs and pools
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        unit = a.units(model, cfg)[:1]  # one work unit: the same code paths, half the time or less
        with run_state() as state:
            again = a.run(model, cfg, out=shared, units=unit)
        assert state.lines() == [], "rows of the first model were taken back"
        fresh = a.run(model, cfg, out=tmp_path / "fresh", units=unit)
    finally:
        torch.set_num_threads(threads)
    ident = run_identity(model).row()
    earlier = next(df for df in first.tables().values() if len(df))
    assert {k: str(earlier[k].iloc[0]) for k in IDENTITY} != {k: str(v) for k, v in ident.items()}
    for table, df in again.tables().items():
        assert all((df[k].astype(str) == str(v)).all() for k, v in ident.items()), f"{table}: not this identity"
    _assert_same(again, fresh)
    # both row sets stay in the folder, each read back by its own identity
    again.save(shared)
    for table, df in a.result.load(shared).tables().items():
        kinds = df[list(IDENTITY)].drop_duplicates()
        assert len(kinds) == (len(first.tables().get(table, ())) > 0) + (len(again.tables().get(table, ())) > 0), table


@pytest.mark.parametrize("name", list(ANALYSES))
def test_the_same_text_read_without_bos_into_the_folder_gets_its_fresh_numbers(name, llama, runs, tmp_path):
    """The same model and text, read without BOS this time (``default_prepend_bos`` off, as a folder trained
    without it now loads): rows of the first run, which read BOS first, are not taken back (the token ids a row
    read are part of its key, not only the text's name or hash)."""
    import shutil

    import torch

    a = ANALYSES[name]
    cfg, _, folder = runs(name)
    shared = tmp_path / "shared"
    shutil.copytree(folder, shared)
    threads, bos = torch.get_num_threads(), llama.cfg.default_prepend_bos
    torch.set_num_threads(1)
    llama.cfg.default_prepend_bos = not bos
    try:
        unit = a.units(llama, cfg)[:1]
        again = a.run(llama, cfg, out=shared, units=unit)
        fresh = a.run(llama, cfg, out=tmp_path / "fresh", units=unit)
    finally:
        llama.cfg.default_prepend_bos = bos
        torch.set_num_threads(threads)
    _assert_same(again, fresh)


# the analyses that read a text by name (a named corpus or a file); tokenwise and geometries are tested in their
# folders (with their state pools), compression's prompts come after a compression of its own
TEXT_FIELD = {
    n: f
    for n, a in ANALYSES.items()
    for f in ("corpus", "sentence_corpus")
    if f in {x.name for x in dataclasses.fields(a.config)} and n not in ("tokenwise", "geometries", "compression")
}


@pytest.mark.parametrize("name", sorted(TEXT_FIELD))
def test_a_text_changed_under_its_file_name_is_computed_again(name, llama, tmp_path, capsys):
    """Run on a text file, the file rewritten, run again into the same folder: the numbers of a fresh folder
    (a changed input under an old name is recomputed), and a run that keeps a log says that it recomputed rows
    (what does not read the text, e.g. BLiMP or zero-shot items, may be read back)."""
    from tests.rerun import changed_corpus_runs

    a = ANALYSES[name]
    cfg = a.config(**{**a.tiny, **({"sentence_tail": 1.0} if TEXT_FIELD[name] == "sentence_corpus" else {})})
    again, fresh, said = changed_corpus_runs(
        lambda m, c, out: a.run(m, c, out=out), llama, cfg, tmp_path, capsys, field=TEXT_FIELD[name]
    )
    _assert_same(again, fresh)
    if [f for f in (tmp_path / "same").glob("*.jsonl") if f.name != "provenance.jsonl"]:  # a resume log
        assert [line for line in said if line.startswith("recomputed")], said
