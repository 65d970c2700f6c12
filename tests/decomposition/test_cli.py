"""tlgeo decompose | profile | ppl on a tiny model: outputs, resume, settings-keyed merges, clear errors
(moved from tests/test_cli.py with the commands)."""

import json

import pandas as pd
import pytest

from tlgeo.cli import main
from tlgeo.runner.results import IDENTITY


def test_run_writes_outputs_and_resumes(tmp_path, capsys):
    out = tmp_path / "run"
    argv = [
        "decompose",
        "--model",
        "tiny:llama",
        "--tokens",
        "300",
        "--profile-tokens",
        "256",
        "--context",
        "128",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    edits = pd.read_csv(out / "edits.csv")
    # baseline + (s_par=0, s_perp=0) for 5 decomposition sites + diag s_par=0
    assert len(edits) == 12 and edits.iloc[0]["site"] == "none"
    assert edits["ppl"].gt(0).all() and (edits.loc[0, "delta_ppl"] == 0)
    assert list(edits.columns) == [
        *IDENTITY,
        "site",
        "s_par",
        "s_perp",
        "layers",
        "skip_first",
        "heads",
        "context",
        "max_tokens",
        "text_sha1",
        "tokens",
        "ppl",
        "nll",
        "n_tokens",
        "n_windows",
        "word_ppl",
        "delta_ppl",
        "corpus",
    ]  # the identity, then the old CLI's columns
    prof = pd.read_csv(out / "profile_summary.csv")
    assert set(prof["site"]) == {"attn", "mlp", "block", "value_full", "value_excl_self"}
    assert {"corpus", "max_tokens", "seq_len"} <= set(prof.columns) and (prof["seq_len"] == 256).all()
    lines = (out / "edits.jsonl").read_text().splitlines()
    # an interruption after 5 runs: the rerun measures only what is missing
    (out / "edits.jsonl").write_text("\n".join(lines[:5]) + "\n")
    assert main(argv) == 0
    again = [json.loads(l) for l in (out / "edits.jsonl").read_text().splitlines()]
    assert len(again) == 12
    assert again[:5] == [json.loads(l) for l in lines[:5]]
    keys = [(r["site"], r["s_par"], r["s_perp"]) for r in again]
    assert len(set(keys)) == 12
    printed = capsys.readouterr().out
    assert "median parallel ratio" in printed and "edits in blocks 1..2 of 0..2, all heads" in printed
    assert "perplexity on wikitext2 (300 tokens, context 128)" in printed and f"{out}/edits.jsonl" in printed
    assert len(pd.read_csv(out / "edits.csv")) == 12  # the rerun replaced its rows


def test_run_default_out_is_runs_not_results(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TLGEO_RUNS", str(tmp_path / "runs"))
    argv = [
        "decompose",
        "--model",
        "tiny:llama",
        "--tokens",
        "100",
        "--profile-tokens",
        "64",
        "--profile-seq-len",
        "32",
        "--context",
        "32",
        "--sites",
        "attn",
    ]
    assert main(argv) == 0
    out = tmp_path / "runs" / "tiny-llama"
    assert len(pd.read_csv(out / "edits.csv")) == 3 and set(pd.read_csv(out / "profile_summary.csv")["site"]) == {
        "attn"
    }


def test_ppl_command(tmp_path):
    out = tmp_path / "ppl"
    argv = [
        "ppl",
        "--model",
        "tiny:llama",
        "--tokens",
        "200",
        "--context",
        "64",
        "--site",
        "value_excl_self",
        "--s-par",
        "0",
        "--heads",
        "0,1",
        "--layers",
        "1-2",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    rows = [json.loads(line) for line in (out / "ppl.jsonl").read_text().splitlines()]
    assert [r["site"] for r in rows] == ["none", "value_excl_self"]
    assert rows[1]["heads"] == [0, 1] and rows[1]["layers"] == [1, 2]
    assert main(argv) == 0  # again, from the log: the rows are replaced, not repeated
    assert len(pd.read_csv(out / "ppl.csv")) == 2


@pytest.mark.parametrize(
    "extra,msg",
    [
        (["--site", "nope"], "unknown site"),
        (["--site", "attn", "--layers", "9"], "out of range"),
        (["--site", "attn", "--s-par", "nan"], "s_par must be finite"),
        (["--site", "attn", "--corpus", "no_such_corpus"], "no_such_corpus"),
        (["--site", "diag", "--s-perp", "0"], "s_perp must be 1"),
    ],
)
def test_ppl_errors(tmp_path, capsys, extra, msg):
    code = main(["ppl", "--model", "tiny:llama", "--tokens", "100", "--out", str(tmp_path), *extra])
    assert code == 2
    assert msg in capsys.readouterr().err


def test_profile_and_run_errors(tmp_path, capsys):
    assert main(["profile", "--model", "tiny:llama", "--sites", "attn,diag", "--out", str(tmp_path)]) == 2
    assert "have no decomposition to profile" in capsys.readouterr().err
    assert main(["decompose", "--model", "tiny:llama", "--sites", "attn,nope", "--out", str(tmp_path)]) == 2
    assert "sites: unknown site 'nope'" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # refused before any work


def test_rerun_with_other_settings_does_not_reuse_rows(tmp_path):
    """The resume log is keyed by the measurement settings too, not just the edit."""
    out = tmp_path / "ppl"
    base = ["decompose", "--model", "tiny:llama", "--profile-tokens", "256", "--context", "64", "--out", str(out)]
    assert main(base + ["--tokens", "150"]) == 0
    first = pd.read_csv(out / "edits.csv")
    assert main(base + ["--tokens", "250"]) == 0
    both = pd.read_csv(out / "edits.csv")  # the first run's rows are kept, keyed by their settings
    second = both[both["max_tokens"] == 250]
    assert (first["n_tokens"] == 150).all() and (second["n_tokens"] == 250).all()
    assert len(both) == 24 and both.loc[both["max_tokens"] == 150, "ppl"].tolist() == first["ppl"].tolist()
    assert len((out / "edits.jsonl").read_text().splitlines()) == 24


def test_help_shows_the_old_defaults():
    import argparse

    from tlgeo.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    run_help = " ".join(sub.choices["decompose"].format_help().split())
    assert "tokens per perplexity window (default: 512)" in run_help
    assert "skips block 0) (default: 1)" in run_help and "tokens profiled" in run_help
    assert "(default: runs/<model>)" in run_help
    prof_help = " ".join(sub.choices["profile"].format_help().split())
    assert "(default: attn,mlp,block,value_full,value_excl_self)" in prof_help and "--per-token" in prof_help
    ppl_help = " ".join(sub.choices["ppl"].format_help().split())
    assert "--site SITE" in ppl_help and "--s-par X" in ppl_help and "--heads INDICES" in ppl_help


def test_ppl_needs_a_site(capsys):
    with pytest.raises(SystemExit) as e:
        main(["ppl", "--model", "tiny:llama"])
    assert e.value.code == 2 and "--site" in capsys.readouterr().err


def test_context_too_long_fails_before_any_progress_bar(tmp_path, capsys):
    code = main(["decompose", "--model", "tiny:llama", "--context", "100000", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 2 and "--context 100000 exceeds the model's context of 256 tokens" in captured.err
    assert "%|" not in captured.err + captured.out and not (tmp_path / "profile_summary.csv").exists()
    code = main(["profile", "--model", "tiny:llama", "--seq-len", "1000", "--out", str(tmp_path)])
    assert code == 2 and "--seq-len 1000 exceeds the model's context of 256 tokens" in capsys.readouterr().err


def test_a_default_window_follows_the_model_a_given_one_does_not(tmp_path, capsys):
    from tlgeo.decomposition.config import DecompositionConfig

    cfg, notes = DecompositionConfig(tokens=64).fit_to(256)  # tiny:llama: 256 positions, the default is 512
    assert cfg.context == 256 and cfg.profile_seq_len == 256 and len(notes) == 1 and "--context" in notes[0]
    assert DecompositionConfig(context=300).fit_to(256)[0].context == 300  # given: left for check_fits to refuse
    code = main(
        ["ppl", "--model", "tiny:llama", "--site", "attn", "--s-par", "0", "--tokens", "64", "--out", str(tmp_path)]
    )
    out = capsys.readouterr().out
    assert code == 0 and "the default 512 is above the model's context of 256 tokens; using 256" in out


def test_results_are_appended_by_settings_not_overwritten(tmp_path, capsys):
    out = tmp_path / "res"
    prof = ["profile", "--model", "tiny:llama", "--seq-len", "64", "--sites", "attn", "--out", str(out)]
    assert main(prof + ["--tokens", "128"]) == 0
    assert main(prof + ["--tokens", "256"]) == 0
    assert main(prof + ["--tokens", "256"]) == 0  # the same settings again: its rows are replaced, not repeated
    df = pd.read_csv(out / "profile_summary.csv")
    assert sorted(df["max_tokens"].unique()) == [128, 256] and len(df) == 2 * 3  # 3 layers per setting
    ppl = ["ppl", "--model", "tiny:llama", "--tokens", "128", "--context", "64", "--site", "attn", "--out", str(out)]
    assert main(ppl + ["--s-par", "0"]) == 0
    assert main(ppl + ["--s-par", "0.5"]) == 0
    rows = pd.read_csv(out / "ppl.csv")
    assert sorted(rows.loc[rows["site"] == "attn", "s_par"]) == [0.0, 0.5] and (rows["site"] == "none").sum() == 1
    printed = capsys.readouterr().out
    assert "attn: s_par=0.5, s_perp=1 in blocks 1..2 of 0..2, all heads" in printed  # what was edited
    assert f"{out}/ppl.csv" in printed and f"{out}/ppl.jsonl" in printed  # every file written, with its size


def test_profile_per_token_file(tmp_path, capsys):
    out = tmp_path / "prof"
    assert (
        main(
            [
                "profile",
                "--model",
                "tiny:llama",
                "--tokens",
                "128",
                "--seq-len",
                "64",
                "--sites",
                "attn,value_excl_self",
                "--per-token",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    rows = pd.read_csv(out / "profile_tokens-wikitext2-t128-s64.csv.gz")
    assert set(rows["site"]) == {"attn", "value_excl_self"}
    assert list(rows.columns[:5]) == ["site", "layer", "head", "seq", "pos"]
    assert "profile_tokens-wikitext2-t128-s64.csv.gz" in capsys.readouterr().out


def test_ctrl_c_prints_one_line(tmp_path, capsys, monkeypatch):
    import tlgeo.decomposition.compare as compare

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(compare, "compare_edits", interrupted)
    out = tmp_path / "run"
    code = main(
        [
            "decompose",
            "--model",
            "tiny:llama",
            "--tokens",
            "200",
            "--profile-tokens",
            "300",
            "--context",
            "64",
            "--out",
            str(out),
        ]
    )
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip() and "%|" not in line]
    assert code == 130 and len(err) == 1, err
    assert err[0].startswith("tlgeo decompose: interrupted.") and f"{out}/edits.jsonl" in err[0]
    assert "profile_summary.csv" in err[0]  # saved by this run before the interruption
    assert err[0].endswith("Rerun the same command to resume.")


def test_ppl_of_another_model_or_dtype_into_one_folder_gives_fresh_numbers(tmp_path, capsys):
    """The trial's cases: model A then model B, float32 then bfloat16, into one --out."""
    out = tmp_path / "shared"
    ppl = ["ppl", "--site", "attn", "--s-perp", "0", "--tokens", "128", "--context", "64", "--out", str(out)]

    def run(*extra):
        assert main([*ppl, *extra]) == 0
        return capsys.readouterr().out

    def fresh(*extra):
        assert main([*ppl[:-1], str(tmp_path / "-".join(extra)), *extra]) == 0
        capsys.readouterr()
        df = pd.read_csv(tmp_path / "-".join(extra) / "ppl.csv")
        return df.drop(columns=["tlgeo_version"]).reset_index(drop=True)

    first = run("--model", "tiny:llama")
    assert "resumed" not in first
    for extra in (["--model", "tiny:gpt2"], ["--model", "tiny:llama", "--dtype", "bfloat16"]):
        printed = run(*extra)
        assert "resumed" not in printed, printed  # nothing of the earlier runs taken back
        shared = pd.read_csv(out / "ppl.csv")
        mine = shared[(shared["model"] == extra[1]) & (shared["dtype"] == (extra[3] if len(extra) > 2 else "float32"))]
        pd.testing.assert_frame_equal(mine.drop(columns=["tlgeo_version"]).reset_index(drop=True), fresh(*extra))
    shared = pd.read_csv(out / "ppl.csv")
    assert len(shared[["model", "dtype"]].drop_duplicates()) == 3 and len(shared) == 3 * 2  # base + edit each
    assert f"resumed 2 rows from {out / 'ppl.jsonl'}" in run("--model", "tiny:llama")  # the same run again
