"""The tlgeo command on a tiny model: outputs, resume, clear errors."""

import json
from pathlib import Path

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
    rows = [json.loads(line) for line in (out / "ppl.jsonl").read_text().splitlines()]
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
    both = pd.read_csv(out / "edits.csv")  # the first run's rows are kept, keyed by their settings
    second = both[both["max_tokens"] == 250]
    assert (first["n_tokens"] == 150).all() and (second["n_tokens"] == 250).all()
    assert len(both) == 24 and both.loc[both["max_tokens"] == 150, "ppl"].tolist() == first["ppl"].tolist()
    assert len((out / "edits.jsonl").read_text().splitlines()) == 24


# ---------------------------------------------------------------------------
# a newcomer's first day: help, bad values, offline models, Ctrl-C, no overwrite
# ---------------------------------------------------------------------------


def _subparsers():
    import argparse

    from tlgeo.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return parser, sub.choices


def test_every_flag_has_help_and_help_shows_defaults():
    parser, commands = _subparsers()
    assert set(commands) == {"run", "profile", "ppl", "atlas", "compress-diag", "dirmag", "tokenwise", "pdsf", "train",
                             "sites", "models"}
    for name, p in commands.items():
        for a in p._actions:
            if a.dest in ("help",):
                continue
            assert a.help and "``" not in a.help, f"tlgeo {name} {a.option_strings}: no help text"
    assert "``" not in parser.format_help()
    run_help = " ".join(commands["run"].format_help().split())
    assert "tokens per perplexity window (default: 512)" in run_help
    assert "skips block 0) (default: 1)" in run_help
    atlas_help = " ".join(commands["atlas"].format_help().split())
    limit = next(a for a in commands["atlas"]._actions if "--zeroshot-limit" in a.option_strings)
    assert limit.help.startswith("first n items of each zero-shot task") and "[decomposition; default 20" in limit.help
    assert "--mlp-tokens" in atlas_help and "--closed-form-tokens" in atlas_help  # every step's budget is a flag


def test_version(capsys):
    import tlgeo

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"tlgeo {tlgeo.__version__}"


@pytest.mark.parametrize("argv, flag, msg", [
    (["ppl", "--site", "attn", "--layers", "abc"], "--layers", "expected indices such as 3,5,10-12"),
    (["ppl", "--site", "attn", "--heads", "0,-1"], "--heads", "expected indices such as 3,5,10-12"),
    (["ppl", "--site", "attn", "--tokens", "-5"], "--tokens", "must be a positive integer (0 = all), got '-5'"),
    (["run", "--context", "0"], "--context", "must be a positive integer"),
    (["atlas", "--ruler-lengths", "1a"], "--ruler-lengths", "invalid comma-separated int list value"),
    (["atlas", "--zeroshot-limit", "-2"], "--zeroshot-limit", "must be a non-negative integer"),
])
def test_bad_values_name_their_flag(argv, flag, msg, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"argument {flag}: {msg}" in err


def test_context_too_long_fails_before_any_progress_bar(tmp_path, capsys):
    code = main(["run", "--model", "tiny:llama", "--context", "100000", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 2 and "--context 100000 exceeds the model's context of 256 tokens" in captured.err
    assert "%|" not in captured.err + captured.out and not (tmp_path / "profile_summary.csv").exists()


def test_unknown_model_offline_fails_at_once(tmp_path, capsys, monkeypatch):
    import time

    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    for name in ("someone/no-such-model", "smollm2_135m"):  # hub-shaped offline; a typo of no known shape
        t = time.perf_counter()
        code = main(["ppl", "--model", name, "--site", "attn", "--out", str(tmp_path)])
        took = time.perf_counter() - t
        err = capsys.readouterr().err.strip()
        assert code == 2 and took < 2.0, took
        assert len(err.splitlines()) == 1 and f"unknown model {name!r}" in err
        assert "smollm2-135m" in err and "TLGEO_GEMMA=1 bash scripts/setup.sh" in err


def test_ctrl_c_prints_one_line(tmp_path, capsys, monkeypatch):
    import tlgeo.decomposition.compare as compare

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(compare, "compare_edits", interrupted)
    out = tmp_path / "run"
    code = main(["run", "--model", "tiny:llama", "--tokens", "200", "--profile-tokens", "300", "--context", "64",
                 "--out", str(out)])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip() and "%|" not in line]
    assert code == 130 and len(err) == 1, err
    assert err[0].startswith("tlgeo run: interrupted.") and f"{out}/edits.jsonl" in err[0]
    assert err[0].endswith("Rerun the same command to resume.")


def test_ctrl_c_in_a_real_process(tmp_path):
    """SIGINT while the atlas sweeps: one line on stderr, no traceback, exit 130."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "atlas"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tlgeo.cli", "atlas", "--model", "tiny:llama", "--out", str(out), "--steps",
         "sweeps", "--full-grids", "--tokens", "20000", "--context", "64"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        # as in a terminal: a shell's background jobs (CI) start with SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        log = out / "logs" / "sweeps.jsonl"
        deadline = time.monotonic() + 120
        while not (log.exists() and log.stat().st_size) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # until the first sweep point is saved
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    lines = [l for l in err.replace("\r", "\n").splitlines() if l.strip() and "%|" not in l and "it/s" not in l]
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and len(lines) == 1, lines
    assert lines[0] == f"tlgeo atlas: interrupted. Finished steps' CSVs and logs are in {out}. " \
                       "Rerun the same command to resume."


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


def test_dirmag_command(tmp_path, capsys):
    out = tmp_path / "dm"
    argv = ["dirmag", "--model", "tiny:llama", "--sentences", "4", "--deltas", "0.02,0.1", "--seeds", "2",
            "--out", str(out)]
    assert main(argv) == 0
    df = pd.read_csv(out / "dirmag_damage.csv")
    assert len(df) == 2 * 2 * 2 and set(df["kind"]) == {"magnitude", "angle"} and (df["layers"] == "[1]").all()
    printed = capsys.readouterr().out
    assert "perturbing blocks.L.hook_resid_post in blocks 1 of 0..2" in printed and "ratio_angle_over_magnitude" in printed
    assert main(argv + ["--relative", "--deltas", "0.5", "--blimp-pairs", "2"]) == 0  # other settings: rows added
    assert len(pd.read_csv(out / "dirmag_damage.csv")) == 8 + 4
    blimp = pd.read_csv(out / "dirmag_blimp.csv")
    assert len(blimp) == 2 * 2 * 7 and set(blimp["n"]) == {2, 12}  # kinds x seeds x (6 paradigms + pooled)
    assert "BLiMP agreement accuracy" in capsys.readouterr().out
    assert main(argv + ["--repair-sentences", "3", "--repair-deltas", "0.05"]) == 0
    repair = pd.read_csv(out / "dirmag_repair.csv")
    assert len(repair) == 2 * 2 * 2 and set(repair["repair"]) == {"attn", "norm"}  # kinds x seeds x repairs
    assert "recovery (%" in capsys.readouterr().out
    assert main(argv + ["--entropy-sentences", "3", "--repair-deltas", "0.05"]) == 0
    assert len(pd.read_csv(out / "dirmag_entropy.csv")) == 2 * 2 and "attention entropy shift" in capsys.readouterr().out
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[1] / "scripts" / "dirmag_table.py"
    table = subprocess.run([sys.executable, str(script), f"tiny={out}"], capture_output=True, text=True, timeout=120)
    assert table.returncode == 0, table.stderr[-2000:]
    lines = table.stdout.splitlines()
    assert lines[0] == "| quantity | tiny | paper |" and all(l.count("|") == 4 for l in lines)
    rows = {l.split(" | ")[0].lstrip("| "): l.split(" | ")[1] for l in lines[2:]}
    assert float(rows["median state norm"]) > 0 and float(rows["clean loss"]) > 0
    assert "BLiMP clean (%)" not in rows  # BLiMP ran at relative deltas only: not comparable, left out
    assert "entropy shift at delta 5: angle / magnitude" not in rows  # the entropy ran at delta 0.05 only


def test_dirmag_probes_command(tmp_path, capsys):
    out = tmp_path / "dm"
    argv = ["dirmag", "--model", "tiny:llama", "--sentences", "2", "--deltas", "0.1", "--seeds", "1",
            "--probe-sentences", "6", "--probe-layers", "0,2", "--out", str(out)]
    assert main(argv) == 0
    probes = pd.read_csv(out / "dirmag_probes.csv")
    assert len(probes) == 2 * 2 * 3 and set(probes["layer"]) == {0, 2} and (probes["train_sentences"] == 6).all()
    printed = capsys.readouterr().out
    assert "probes (UPOS accuracy %" in printed and "dirmag_probes.jsonl" not in printed  # nothing resumable to list
    assert main(argv) == 0  # the same settings again: rows replaced, not added
    assert len(pd.read_csv(out / "dirmag_probes.csv")) == 12


def test_dirmag_grid_parts(tmp_path):
    out = tmp_path / "dm"
    assert main(["dirmag", "--model", "tiny:llama", "--sentences", "2", "--seeds", "1", "--absolute-deltas", "0.1",
                 "--norm-fractions", "0.5", "--out", str(out)]) == 0
    df = pd.read_csv(out / "dirmag_damage.csv")
    assert 0.1 in set(df["delta"]) and df["delta"].nunique() == 2
    assert df.loc[df["delta"] != 0.1, "delta_over_norm"].round(2).eq(0.5).all()


def test_tokenwise_command(tmp_path, capsys):
    out = tmp_path / "tw"
    argv = ["tokenwise", "--model", "tiny:llama", "--tokens", "200", "--seq-len", "21", "--classes",
            "diag_psd,linear", "--k", "8", "--patch-tokens", "12", "--out", str(out)]
    assert main(argv) == 0
    geo = pd.read_csv(out / "tokenwise_geometry.csv")
    assert len(geo) == 3 * 2 and set(geo["class"]) == {"diag_psd", "linear"} and (geo["n_tokens"] == 200).all()
    corr = pd.read_csv(out / "tokenwise_correlation.csv")
    assert len(corr) == 3 * 2 * 2
    printed = capsys.readouterr().out
    assert "median ||r|| / ||Delta_full||" in printed and "Spearman(error, KL" in printed
    assert main(argv) == 0  # again: from the pool and the log, rows replaced
    assert len(pd.read_csv(out / "tokenwise_geometry.csv")) == 6
    assert main(argv[:-2] + ["--classes", "mlp9", "--out", str(out)]) == 2
    assert "unknown map class(es) ['mlp9']" in capsys.readouterr().err


def test_pdsf_command(tmp_path, capsys):
    out = tmp_path / "pdsf"
    argv = ["pdsf", "--model", "tiny:llama", "--layers", "0,3", "--per-group", "1", "--new-tokens", "3",
            "--conditions", "D,random", "--bos", "no", "--single-pass", "F_attenuate,D_rotate", "--repeats", "1",
            "--out", str(out)]
    assert main(argv) == 0
    layers = pd.read_csv(out / "pdsf_layers.csv")
    assert list(layers["layer"]) == [0, 3] and (layers["n_prompts"] == 224).all() and not layers["bos"].any()
    s = pd.read_csv(out / "pdsf_generation_summary.csv")
    assert list(s["condition"]) == ["D", "random"] and (s["n"] == 12).all()
    printed = capsys.readouterr().out
    assert "224 specA prompts (raw, BOS off)" in printed and "immediate divergence D 64 %" in printed
    assert main(argv) == 0  # again: generation from the log, rows replaced
    assert len(pd.read_csv(out / "pdsf_layers.csv")) == 2
    assert len(pd.read_csv(out / "pdsf_generation_summary.csv")) == 2 and len(pd.read_csv(out / "pdsf_generation.csv.gz")) == 24
    sp = pd.read_csv(out / "pdsf_single_pass_summary.csv")
    assert sorted(sp["condition"]) == ["D_rotate", "F_attenuate"] and len(pd.read_csv(out / "pdsf_single_pass.csv.gz")) == 448
    assert list(pd.read_csv(out / "pdsf_dynamics.csv")["layer"]) == [1, 2, 3]
    assert main(argv[:-2] + ["--mode", "faithful", "--out", str(out)]) == 0  # another setting: kept beside
    assert len(pd.read_csv(out / "pdsf_generation_summary.csv")) == 4 and len(pd.read_csv(out / "pdsf_single_pass_summary.csv")) == 4
    assert main(argv[:-2] + ["--conditions", "P", "--out", str(out)]) == 2
    assert "unknown subspace(s) ['P']" in capsys.readouterr().err
    assert main(argv[:-2] + ["--single-pass", "P_rotate", "--out", str(tmp_path / "bad")]) == 2
    assert "unknown single-pass condition(s) ['P_rotate']" in capsys.readouterr().err
    assert not (tmp_path / "bad" / "pdsf_layers.csv").exists()  # refused before any work


def test_dirmag_on_held_out_corpus_sentences(tmp_path):
    out = tmp_path / "dm"
    base = ["dirmag", "--model", "tiny:llama", "--sentences", "3", "--seeds", "1", "--deltas", "0.1", "--out", str(out)]
    assert main(base) == 0 and main(base + ["--sentence-corpus", "mobydick,bible"]) == 0
    df = pd.read_csv(out / "dirmag_damage.csv")
    assert len(df) == 2 * 2 and df["text_sha1"].nunique() == 2 and set(df["n_sentences"]) == {3}
