"""``tlgeo tokenwise`` on the tiny model: its CSVs, printed tables, resume and refusals (moved from
tests/test_cli.py), its default output folder, and its flags generated from the config."""

from __future__ import annotations

import pandas as pd

from tlgeo.cli import main
from tlgeo.runner.identity import RunIdentity
from tlgeo.runner.results import IDENTITY


def test_tokenwise_command(tmp_path, capsys):
    out = tmp_path / "tw"
    argv = [
        "tokenwise",
        "--model",
        "tiny:llama",
        "--tokens",
        "200",
        "--seq-len",
        "21",
        "--classes",
        "diag_psd,linear",
        "--k",
        "8",
        "--patch-tokens",
        "12",
        "--n-boot",
        "100",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    geo = pd.read_csv(out / "tokenwise_geometry.csv")
    assert len(geo) == 3 * 2 and set(geo["class"]) == {"diag_psd", "linear"} and (geo["n_tokens"] == 200).all()
    corr = pd.read_csv(out / "tokenwise_correlation.csv")
    assert len(corr) == 3 * 2 * 2
    printed = capsys.readouterr().out
    assert "median ||r|| / ||Delta_full||" in printed and "Spearman(error, KL" in printed
    assert "note: Spearman on 12 patched tokens per layer and class: an indication only" in printed
    assert main(argv) == 0  # again: from the pool and the log, rows replaced
    assert len(pd.read_csv(out / "tokenwise_geometry.csv")) == 6
    assert main(argv[:-2] + ["--classes", "mlp9", "--out", str(out)]) == 2
    assert "unknown map class(es) ['mlp9']" in capsys.readouterr().err
    # the identity columns, then the old command's columns in its order, and its pool folder (one per identity)
    assert list(geo.columns[:6]) == list(IDENTITY) and list(geo.columns[-2:]) == ["corpus", "seq_len"]
    assert (geo["model"] == "tiny:llama").all()
    assert list(corr.columns) == [
        *IDENTITY,
        "layer",
        "class",
        "target",
        "spearman",
        "ci_low",
        "ci_high",
        "n",
        "corpus",
        "seq_len",
        "k",
        "exclude_sequence",
        "rank",
        "patch_tokens",
        "seed",
        "n_tokens",
    ]
    tokens = pd.read_csv(out / "tokenwise_tokens.csv.gz")
    assert list(tokens.columns[:14]) == [
        *IDENTITY,
        "class",
        "layer",
        "index",
        "kl",
        "kl_following",
        "rel_error",
        "residual_angle",
        "window",
    ]
    assert len(tokens) == 3 * 2 * 12 and (tokens["patch_tokens"] == 12).all()
    key = RunIdentity(**{k: geo[k].iloc[0] for k in IDENTITY}).key
    assert [p.name for p in out.glob(f"tokenwise_pool-wikitext2-t200-s21-float16-{key}-*/meta.json")] == ["meta.json"]
    assert (out / "tokenwise.jsonl").exists()


def test_tokenwise_command_defaults_to_runs_and_checks_before_loading(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TLGEO_RUNS", str(tmp_path / "runs"))
    argv = [
        "tokenwise",
        "--model",
        "tiny:llama",
        "--tokens",
        "60",
        "--seq-len",
        "16",
        "--classes",
        "linear",
        "--k",
        "6",
        "--patch-tokens",
        "5",
        "--layers",
        "1,2",
        "--patch-layer-count",
        "1",
        "--n-boot",
        "10",
    ]
    assert main(argv) == 0
    out = tmp_path / "runs" / "tiny-llama"
    corr = pd.read_csv(out / "tokenwise_correlation.csv")
    assert set(corr["layer"]) == {1}  # one patched layer of the fitted 1, 2: the first
    assert "paper: 0.7-0.95" in capsys.readouterr().out
    assert main(argv + ["--patch-layers", "0"]) == 2  # not a fitted layer
    assert "must be a non-empty subset of the fitted layers" in capsys.readouterr().err
    assert main(argv + ["--layers", "7"]) == 2
    assert "out of range" in capsys.readouterr().err


def test_flags_are_the_config_fields():
    from tlgeo.cli import build_parser
    from tlgeo.tokenwise.config import TokenwiseConfig

    args = build_parser().parse_args(
        ["tokenwise", "--no-exclude-sequence", "--patch-tokens", "9", "--layers", "0-2", "--classes", "global,mlp"]
    )
    from tlgeo.runner.cliargs import config_from_args

    cfg = config_from_args(TokenwiseConfig, args)
    assert cfg.patch_tokens == 9 and not cfg.exclude_sequence and cfg.layers == (0, 1, 2)
    assert cfg.classes == ("global", "mlp")
    default = TokenwiseConfig()
    assert cfg.replace(patch_tokens=256, exclude_sequence=True, layers=None, classes=default.classes) == default
