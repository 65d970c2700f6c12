"""The tlgeo command on a tiny model: outputs, resume, clear errors."""

import json

import pandas as pd
import pytest

from tlgeo.cli import main


def test_run_writes_outputs_and_resumes(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["run", "--model", "tiny:llama", "--tokens", "300", "--profile-tokens", "256",
            "--context", "128", "--out", str(out)]
    assert main(argv) == 0
    edits = pd.read_csv(out / "edits.csv")
    # baseline + (s_par=0, s_perp=0) for 5 decomposition sites + diag s_par=0
    assert len(edits) == 12 and edits.iloc[0]["site"] == "none"
    assert edits["ppl"].gt(0).all() and (edits.loc[0, "delta_ppl"] == 0)
    prof = pd.read_csv(out / "profile_summary.csv")
    assert set(prof["site"]) == {"attn", "mlp", "block", "value_full", "value_excl_self"}
    lines = (out / "edits.jsonl").read_text().splitlines()
    # an interruption after 5 runs: the rerun measures only what is missing
    (out / "edits.jsonl").write_text("\n".join(lines[:5]) + "\n")
    assert main(argv) == 0
    again = [json.loads(l) for l in (out / "edits.jsonl").read_text().splitlines()]
    assert len(again) == 12
    assert again[:5] == [json.loads(l) for l in lines[:5]]
    keys = [(r["site"], r["s_par"], r["s_perp"]) for r in again]
    assert len(set(keys)) == 12
    assert "median parallel ratio" in capsys.readouterr().out


def test_ppl_command(tmp_path):
    out = tmp_path / "ppl"
    argv = ["ppl", "--model", "tiny:llama", "--tokens", "200", "--context", "64", "--site", "value_excl_self",
            "--s-par", "0", "--heads", "0,1", "--layers", "1-2", "--out", str(out)]
    assert main(argv) == 0
    rows = json.loads((out / "ppl.json").read_text())
    assert [r["site"] for r in rows] == ["none", "value_excl_self"]
    assert rows[1]["heads"] == [0, 1] and rows[1]["layers"] == [1, 2]


@pytest.mark.parametrize(
    "extra,msg",
    [
        (["--site", "nope"], "unknown site"),
        (["--site", "attn", "--layers", "9"], "out of range"),
        (["--site", "attn", "--s-par", "nan"], "s_par must be finite"),
        (["--site", "attn", "--corpus", "no_such_corpus"], "no_such_corpus"),
    ],
)
def test_cli_errors(tmp_path, capsys, extra, msg):
    code = main(["ppl", "--model", "tiny:llama", "--tokens", "100", "--out", str(tmp_path), *extra])
    assert code == 2
    assert msg in capsys.readouterr().err


def test_listing_commands(capsys):
    assert main(["sites"]) == 0 and "value_excl_self" in capsys.readouterr().out
    assert main(["models"]) == 0 and "smollm2-135m" in capsys.readouterr().out


def test_rerun_with_other_settings_does_not_reuse_rows(tmp_path):
    """The resume log is keyed by the measurement settings too, not just the edit."""
    out = tmp_path / "ppl"
    base = ["run", "--model", "tiny:llama", "--profile-tokens", "256", "--context", "64", "--out", str(out)]
    assert main(base + ["--tokens", "150"]) == 0
    first = pd.read_csv(out / "edits.csv")
    assert main(base + ["--tokens", "250"]) == 0
    second = pd.read_csv(out / "edits.csv")
    assert (first["n_tokens"] == 150).all() and (second["n_tokens"] == 250).all()
    assert len((out / "edits.jsonl").read_text().splitlines()) == 24
