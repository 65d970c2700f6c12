"""``run(model, TokenwiseConfig)``: tables saved as they are done, units, and a whole run resumed
from the logs of runs over its units."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.rerun import changed_corpus_runs
from tlgeo.tokenwise import TokenwiseConfig, TokenwiseResult, run, units

CFG = TokenwiseConfig(
    tokens=90,
    seq_len=16,
    classes=("diag_psd", "global"),
    k=6,
    patch_tokens=8,
    n_boot=10,
    fit_workers=1,
    batch_size=8,
    layers=(0, 2),
)


def test_units_split_share_a_log_and_a_whole_run_resumes_from_it(tmp_path, llama, monkeypatch):
    us = units(llama, CFG)
    assert us == [("diag_psd", 0), ("diag_psd", 2), ("global", 0), ("global", 2)]
    parts = [run(llama, CFG, out=tmp_path, units=us[i::2]) for i in range(2)]
    saved = TokenwiseResult.load(tmp_path)
    assert len(saved.geometry) == 4 and len(saved.correlation) == 2 * 2 * 2 and len(saved.tokens) == 2 * 2 * 8
    assert saved.geometry["model"].nunique() == 1 and (saved.tokens["corpus"] == "wikitext2").all()
    assert [set(p.tokens["layer"]) for p in parts] == [{0}, {2}]  # each class patched at one layer per part

    import tlgeo.tokenwise.analysis as A

    def boom(*a, **k):
        raise AssertionError("recomputed")

    monkeypatch.setattr(A, "patch_kl_sets", boom)
    monkeypatch.setattr(A, "layer_outputs", boom)
    whole = run(llama, CFG, out=tmp_path)  # geometry and patching (layers 0 and 2 together) from the parts' log
    merged = TokenwiseResult.merge(parts)
    for name in ("geometry", "correlation", "tokens"):
        key = [k for k in TokenwiseResult.table(name).key if k in whole.tables()[name].columns]
        a = whole.tables()[name].sort_values(key).reset_index(drop=True)
        b = merged.tables()[name].sort_values(key).reset_index(drop=True)[a.columns]
        pd.testing.assert_frame_equal(a, b, check_dtype=False)


def test_bad_units_and_layers_fail_before_any_work(llama):
    with pytest.raises(ValueError, match="not \\(class, layer\\) pairs"):
        run(llama, CFG, units=[("linear", 0)])
    with pytest.raises(ValueError, match="out of range"):
        run(llama, CFG.replace(layers=(0, 9)))
    with pytest.raises(ValueError, match="unknown map class"):
        TokenwiseConfig(classes=("mlp9",))
    with pytest.raises(ValueError, match="subset of the fitted layers"):
        TokenwiseConfig(layers=(0, 1), patch_layers=(2,))
    assert TokenwiseConfig(patch_layer_count=2).patched_layers(30) == [0, 29]
    assert TokenwiseConfig(layers=(4, 5, 6, 7), patch_layer_count=3).patched_layers(30) == [4, 6, 7]


def test_a_corpus_file_changed_under_its_name_is_computed_again(tmp_path, llama, capsys):
    again, fresh, said = changed_corpus_runs(run, llama, CFG, tmp_path, capsys)
    for name in ("geometry", "correlation", "tokens"):
        pd.testing.assert_frame_equal(again.tables()[name], fresh.tables()[name])
    assert [line for line in said if line.startswith("recomputed")], said
    assert len(list(tmp_path.glob("same/tokenwise_pool-*"))) == 2  # the old text's pool is not reused
    saved = TokenwiseResult.load(tmp_path / "same")
    assert len(saved.geometry) == len(fresh.geometry)  # the old text's rows replaced
