"""``tlgeo pdsf`` on the tiny llama: its CSVs, printed tables, reruns (rows replaced, other settings
kept beside), bad values refused before any work, and an interrupted run resumed from its logs."""

import pandas as pd
import pytest

from tlgeo.cli import main


def test_pdsf_command(tmp_path, capsys):
    out = tmp_path / "pdsf"
    argv = [
        "pdsf",
        "--model",
        "tiny:llama",
        "--layers",
        "0,3",
        "--per-group",
        "1",
        "--new-tokens",
        "3",
        "--conditions",
        "D,random",
        "--bos",
        "no",
        "--single-pass",
        "F_attenuate,D_rotate",
        "--repeats",
        "1",
        "--geometry-per-group",
        "2",
        "--out",
        str(out),
    ]  # 14 groups x 2 specA prompts
    assert main(argv) == 0
    layers = pd.read_csv(out / "pdsf_layers.csv")
    assert list(layers["layer"]) == [0, 3] and (layers["n_prompts"] == 28).all() and not layers["bos"].any()
    s = pd.read_csv(out / "pdsf_generation_summary.csv")
    assert list(s["condition"]) == ["D", "random"] and (s["n"] == 12).all()
    printed = capsys.readouterr().out
    assert "28 specA prompts (raw, BOS off)" in printed and "immediate divergence D 64 %" in printed
    assert "single-pass edits at state 1 of the last prompt token (paper, KL nats: F-transplant 5.63" in printed
    assert main(argv) == 0  # again: every stage from its log, rows replaced
    assert "geometry: read back from" in capsys.readouterr().out
    assert len(pd.read_csv(out / "pdsf_layers.csv")) == 2
    assert (
        len(pd.read_csv(out / "pdsf_generation_summary.csv")) == 2
        and len(pd.read_csv(out / "pdsf_generation.csv.gz")) == 24
    )
    sp = pd.read_csv(out / "pdsf_single_pass_summary.csv")
    assert (
        sorted(sp["condition"]) == ["D_rotate", "F_attenuate"]
        and len(pd.read_csv(out / "pdsf_single_pass.csv.gz")) == 2 * 28
    )
    assert list(pd.read_csv(out / "pdsf_dynamics.csv")["layer"]) == [1, 2, 3]
    assert main(argv[:-2] + ["--mode", "faithful", "--out", str(out)]) == 0  # another setting: kept beside
    assert (
        len(pd.read_csv(out / "pdsf_generation_summary.csv")) == 4
        and len(pd.read_csv(out / "pdsf_single_pass_summary.csv")) == 4
    )
    assert main(argv[:-2] + ["--conditions", "P", "--out", str(out)]) == 2
    assert "unknown subspace(s) ['P']" in capsys.readouterr().err
    assert main(argv[:-2] + ["--single-pass", "P_rotate", "--out", str(tmp_path / "bad")]) == 2
    assert "unknown single-pass condition(s) ['P_rotate']" in capsys.readouterr().err
    assert not (tmp_path / "bad" / "pdsf_layers.csv").exists()  # refused before any work
    assert main(argv[:-2] + ["--edit-layer", "9", "--out", str(tmp_path / "bad")]) == 2
    assert "edit_layer 9 out of range" in capsys.readouterr().err
    assert not (tmp_path / "bad" / "pdsf_layers.csv").exists()


SMALL = [
    "pdsf",
    "--model",
    "tiny:llama",
    "--layers",
    "0,2",
    "--geometry-per-group",
    "2",
    "--single-pass-per-group",
    "1",
    "--single-pass",
    "D_rotate,F_attenuate,F_mix",
    "--repeats",
    "1",
    "--no-complexity",
    "--generate",
    "none",
]


def test_per_group_limits_and_skips(tmp_path):
    out = tmp_path / "small"
    assert main(SMALL + ["--out", str(out)]) == 0
    assert (pd.read_csv(out / "pdsf_layers.csv")["n_prompts"] == 28).all()
    assert (pd.read_csv(out / "pdsf_single_pass_summary.csv")["n_prompts"] == 14).all()
    assert not (out / "pdsf_generation_summary.csv").exists() and not (out / "pdsf_generation.jsonl").exists()
    skip = tmp_path / "skip"
    assert main(SMALL + ["--geometry-per-group", "0", "--single-pass", "none", "--out", str(skip)]) == 0
    assert not list(skip.glob("*.csv"))


def test_interrupted_run_resumes_geometry_and_single_pass(tmp_path, capsys, monkeypatch):
    import tlgeo.pdsf.analysis as A

    whole, out = tmp_path / "whole", tmp_path / "resumed"
    assert main(SMALL + ["--out", str(whole)]) == 0
    real = A.single_pass

    def interrupted(*a, conditions, on_condition, **k):  # the first condition finishes, then Ctrl-C
        real(*a, conditions=conditions[:1], on_condition=on_condition, **k)
        raise KeyboardInterrupt

    monkeypatch.setattr(A, "single_pass", interrupted)
    assert main(SMALL + ["--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "pdsf_layers.csv" in err and "pdsf_single_pass.jsonl" in err
    assert (out / "pdsf_layers.csv").exists() and not (out / "pdsf_single_pass_summary.csv").exists()

    boom = lambda *a, **k: (_ for _ in ()).throw(AssertionError("recomputed"))  # noqa: E731
    monkeypatch.setattr(A, "pdsf_geometry", boom)
    ran = []

    def rest(*a, conditions, **k):
        ran.append(list(conditions))
        return real(*a, conditions=conditions, **k)

    monkeypatch.setattr(A, "single_pass", rest)
    assert main(SMALL + ["--out", str(out)]) == 0
    assert ran == [["F_attenuate", "F_mix"]]  # D_rotate was read back from the log
    printed = capsys.readouterr().out
    assert "geometry: read back from" in printed and "single pass: D_rotate read back from" in printed
    for name in (
        "pdsf_layers.csv",
        "pdsf_parts.csv",
        "pdsf_single_pass.csv.gz",
        "pdsf_single_pass_angles.csv",
        "pdsf_single_pass_summary.csv",
    ):
        pd.testing.assert_frame_equal(pd.read_csv(out / name), pd.read_csv(whole / name), check_exact=True, obj=name)


def test_config_checks_once():
    from tlgeo.pdsf import PDSFConfig

    with pytest.raises(ValueError, match=r"conditions: unknown subspace\(s\) \['P'\]"):
        PDSFConfig(conditions=("D", "P"))
    with pytest.raises(ValueError, match="prompts: unknown value"):
        PDSFConfig(prompts="specC")
    with pytest.raises(ValueError, match="new_tokens must be at least 2"):
        PDSFConfig(new_tokens=1)
    assert PDSFConfig(new_tokens=1, generate="none").generation_conditions() == ()
    assert PDSFConfig(conditions=()).conditions == PDSFConfig().conditions  # empty: all, as the old flag
    assert PDSFConfig(single_pass=("none",)).single_pass_conditions() == ()


def test_one_geometry_prompt_per_group_is_refused_before_any_work(tmp_path, capsys):
    """The groups' silhouette needs two prompts per group: one is a one-line error, not a late sklearn one."""
    assert main(["pdsf", "--model", "tiny:llama", "--geometry-per-group", "1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "geometry_per_group 1: the groups' discrimination" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "pdsf_layers.csv").exists()
