"""tlgeo atlas end to end on a tiny model: every step writes its CSV, the report is
self-contained, and a rerun reuses what is done."""

import dataclasses
import json
import shutil

import pandas as pd
import pytest

from tlgeo.decomposition.summary import PAPER, atlas_summary
from tlgeo.report.atlas import STEPS, AtlasConfig, run_atlas

from .conftest import tiny_cfg


def test_atlas_end_to_end_and_resume(tmp_path, llama, atlas_run):
    out = tmp_path / "atlas"
    shutil.copytree(atlas_run[0], out)  # the shared run, copied: this test reruns a step in it
    cfg = tiny_cfg(out)
    html = (out / "report.html").read_text()
    for title in ("Figure 1", "Figure 3", "Tables 1, 2, 8", "Figure 7", "Table 10", "Table 5", "Table 6"):
        assert title in html
    assert html.count("var CircuitsVis=") == 1 and "unpkg.com" not in html
    for name in (
        "profile_summary",
        "sweeps",
        "compare",
        "heads_sensitivity",
        "mlp_carrier",
        "closed_form_errors",
        "audit",
    ):
        assert (out / f"{name}.csv").exists(), name
    compare = pd.read_csv(out / "compare.csv")
    assert list(compare["condition"]) == ["unedited", "value_excl_self s_par=0", "attn s_par=0"]
    paired = pd.read_csv(out / "compare_zeroshot_paired.csv").set_index(["condition", "metric"])
    for cond in ("value_excl_self s_par=0", "attn s_par=0"):  # one task: the paired change is the accuracy change
        c = compare.set_index("condition")
        assert paired.loc[(cond, "acc"), "delta"] == pytest.approx(
            c.loc[cond, "zeroshot_acc"] - c.loc["unedited", "zeroshot_acc"], abs=1e-9
        )
    errors = pd.read_csv(out / "closed_form_errors.csv")
    exact = errors[errors["variant"].isin(["value_full", "value_excl_self"])]
    assert exact["rel_err"].max() < 1e-4  # the closed form reproduces the value-space edit

    timings = pd.read_csv(out / "timings.csv")
    assert list(timings["step"]) == list(STEPS) and (timings["seconds"] > 0).all()
    assert timings["peak_rss_mb_so_far"].is_monotonic_increasing and timings["peak_rss_mb_so_far"].iloc[0] > 50

    # the headline rows are read back from the CSVs
    summary = atlas_summary(out).set_index(["table", "row", "quantity"])["value"]
    assert {"ppl", "zeroshot", "audit", "mlp_carrier", "closed_form", "heads"} <= set(summary.index.get_level_values(0))
    assert summary["ppl", "unedited", "delta_ppl"] == 0.0
    assert summary["ppl", "attn s_par=0", "ppl"] == pytest.approx(
        compare.set_index("condition").loc["attn s_par=0", "ppl"]
    )
    assert summary["closed_form", "value_excl_self", "max abs dlogit"] < 1e-3
    assert 0 <= summary["heads", "value_excl_self", "share alpha > 0"] <= 1
    sweeps = pd.read_csv(out / "sweeps.csv").set_index(["site", "axis", "scale"])
    assert summary["ppl", "mlp s_par=0", "ppl"] == pytest.approx(sweeps.loc[("mlp", "s_par", 0.0), "ppl"])
    assert all(k[0] in set(summary.index.get_level_values(0)) | {"ruler"} for k in PAPER)

    # a rerun loads every finished step: no log grows, the sweep table is the same
    logs = {p.name: p.read_text() for p in out.glob("*.jsonl")}
    sweeps = pd.read_csv(out / "sweeps.csv")
    run_atlas(dataclasses.replace(cfg, steps=("compare",)), model=llama)
    assert {p.name: p.read_text() for p in out.glob("*.jsonl")} == logs
    pd.testing.assert_frame_equal(pd.read_csv(out / "sweeps.csv"), sweeps)
    # the partial rerun adds its own timing rows and keeps the first run's; the steps stay on record
    again = pd.read_csv(out / "timings.csv")
    assert list(again["step"]) == list(STEPS) + ["compare"] and again["run"].nunique() <= 2
    pd.testing.assert_frame_equal(again.iloc[: len(STEPS)], timings)
    assert json.loads((out / "config.json").read_text())["steps"] == list(STEPS)


def test_the_comparison_reads_the_perplexities_the_sweeps_measured(atlas_dir, llama):
    from tlgeo.decomposition.experiments import run_compare

    b = tiny_cfg(atlas_dir).chapter_budgets()["decomposition"]
    shared = pd.read_csv(atlas_dir / "compare_ppl.csv")
    assert (shared["source"] == "sweeps").all()  # not measured again
    own = run_compare(llama, b.compare_config(), units=[("ppl",)]).compare_ppl  # no folder: measured
    assert (own["source"] == "measured").all()
    cols = ["condition", "site", "s_par", "s_perp", "skip_first", "n_tokens"]
    pd.testing.assert_frame_equal(shared[cols], own[cols])
    assert shared["ppl"].to_numpy() == pytest.approx(own["ppl"].to_numpy(), rel=1e-5)
    assert shared["delta_ppl"].to_numpy() == pytest.approx(own["delta_ppl"].to_numpy(), rel=1e-4, abs=1e-6)


def test_atlas_errors(tmp_path, llama):
    with pytest.raises(ValueError, match="unknown atlas step"):
        run_atlas(AtlasConfig(model="tiny:llama", out=tmp_path, steps=("nope",)), model=llama)
    with pytest.raises(ValueError, match="exceeds the model's n_ctx"):
        run_atlas(
            AtlasConfig(model="tiny:llama", out=tmp_path, budgets={"decomposition_context": 4096}, steps=("profile",)),
            model=llama,
        )
    with pytest.raises(ValueError, match=r"unknown atlas budget\(s\) \['contxt'\]"):
        run_atlas(AtlasConfig(model="tiny:llama", out=tmp_path, budgets={"contxt": 64}), model=llama)
    assert set(STEPS) == {
        "profile",
        "sweeps",
        "compare",
        "heads",
        "mlp_carrier",
        "closed_form",
        "audit",
        "dirmag",
        "tokenwise",
        "pdsf",
        "patching",
        "circuits",
        "geometries",
    }


def test_an_atlas_folder_of_another_model_run_is_refused_before_any_work(tmp_path, llama, monkeypatch):
    import json

    import tlgeo.report.atlas as A
    from tlgeo.runner.identity import run_identity

    monkeypatch.setattr(A, "bare_forward_seconds", lambda *a: pytest.fail("started work"))
    cfg = AtlasConfig(model="tiny:llama", out=tmp_path, steps=("profile",))
    mine = run_identity(llama).row()
    (tmp_path / "config.json").write_text(json.dumps({"identity": {**mine, "dtype": "bfloat16"}, "steps": []}))
    with pytest.raises(ValueError, match="holds the atlas of another model run \\(dtype bfloat16 -> float32\\)"):
        run_atlas(cfg, model=llama)
    (tmp_path / "config.json").write_text(json.dumps({"steps": ["profile"]}))  # an older tlgeo's atlas
    with pytest.raises(ValueError, match="identity was not recorded"):
        run_atlas(cfg, model=llama)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]  # nothing written


def test_ruler_scores_the_unedited_model_and_its_ruler_sites_only(tmp_path):
    from tlgeo.models import tiny_model

    model = tiny_model("llama", max_position_embeddings=512)  # RULER's template needs ~380 byte tokens
    out = tmp_path / "atlas"
    cfg = AtlasConfig(
        model="tiny:llama",
        out=out,
        steps=("compare",),
        budgets=dict(
            decomposition_context=64,
            decomposition_sweep_tokens=128,
            decomposition_compare_sites=("value_excl_self", "attn"),
            decomposition_compare_scales=(0.0,),
            decomposition_zeroshot_tasks=(),
            decomposition_ruler_tasks=("niah_single",),
            decomposition_ruler_lengths=(400,),
            decomposition_ruler_samples=1,
        ),
    )
    run_atlas(cfg, model=model)
    ruler = pd.read_csv(out / "compare_ruler.csv")
    assert set(ruler["condition"]) == {"unedited", "value_excl_self s_par=0"}  # attn is not a RULER site
    timings = pd.read_csv(out / "timings.csv")
    assert (timings["bare_forwards"] > 0).all()  # each step as a multiple of a bare 4 x 256-token forward
