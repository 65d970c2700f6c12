"""``tlgeo dirmag`` on a tiny model: every part, resume by settings, the table script."""

from pathlib import Path

import pandas as pd

from tlgeo.cli import main


def test_dirmag_command(tmp_path, capsys):
    out = tmp_path / "dm"
    argv = [
        "dirmag",
        "--model",
        "tiny:llama",
        "--sentences",
        "4",
        "--deltas",
        "0.02,0.1",
        "--seeds",
        "2",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    df = pd.read_csv(out / "dirmag_damage.csv")
    assert len(df) == 2 * 2 * 2 and set(df["kind"]) == {"magnitude", "angle"} and (df["layers"] == "[1]").all()
    printed = capsys.readouterr().out
    assert (
        "perturbing blocks.L.hook_resid_post in blocks 1 of 0..2" in printed and "ratio_angle_over_magnitude" in printed
    )
    assert main(argv + ["--relative", "--deltas", "0.5", "--blimp-pairs", "2"]) == 0  # other settings: rows added
    assert len(pd.read_csv(out / "dirmag_damage.csv")) == 8 + 4
    blimp = pd.read_csv(out / "dirmag_blimp.csv")
    assert len(blimp) == 2 * 2 * 7 and set(blimp["n"]) == {2, 12}  # kinds x seeds x (6 paradigms + pooled)
    assert "BLiMP agreement accuracy" in capsys.readouterr().out
    assert main(argv + ["--repair-sentences", "3", "--repair-deltas", "0.05"]) == 0
    repair = pd.read_csv(out / "dirmag_repair.csv")
    assert len(repair) == 2 * 2 * 2 and set(repair["repair"]) == {"attn", "norm"}  # kinds x seeds x repairs
    printed = capsys.readouterr().out
    assert "recovery (%" in printed
    assert "note: damage and BLiMP on 4 sentences, repair on 3 sentences, 2 seed(s): an indication only" in printed
    assert main(argv + ["--entropy-sentences", "3", "--repair-deltas", "0.05"]) == 0
    assert (
        len(pd.read_csv(out / "dirmag_entropy.csv")) == 2 * 2 and "attention entropy shift" in capsys.readouterr().out
    )
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "scripts" / "dirmag_table.py"
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
    argv = [
        "dirmag",
        "--model",
        "tiny:llama",
        "--sentences",
        "2",
        "--deltas",
        "0.1",
        "--seeds",
        "1",
        "--probe-sentences",
        "6",
        "--probe-layers",
        "0,2",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    probes = pd.read_csv(out / "dirmag_probes.csv")
    assert len(probes) == 2 * 2 * 3 and set(probes["layer"]) == {0, 2} and (probes["train_sentences"] == 6).all()
    printed = capsys.readouterr().out
    assert "probes (UPOS accuracy %" in printed and "dirmag_probes.jsonl" not in printed  # nothing resumable to list
    assert main(argv) == 0  # the same settings again: rows replaced, not added
    assert len(pd.read_csv(out / "dirmag_probes.csv")) == 12


def test_dirmag_grid_parts(tmp_path):
    out = tmp_path / "dm"
    assert (
        main(
            [
                "dirmag",
                "--model",
                "tiny:llama",
                "--sentences",
                "2",
                "--seeds",
                "1",
                "--absolute-deltas",
                "0.1",
                "--norm-fractions",
                "0.5",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    df = pd.read_csv(out / "dirmag_damage.csv")
    assert 0.1 in set(df["delta"]) and df["delta"].nunique() == 2
    assert df.loc[df["delta"] != 0.1, "delta_over_norm"].round(2).eq(0.5).all()


def test_dirmag_on_held_out_corpus_sentences(tmp_path):
    out = tmp_path / "dm"
    base = ["dirmag", "--model", "tiny:llama", "--sentences", "3", "--seeds", "1", "--deltas", "0.1", "--out", str(out)]
    assert main(base) == 0 and main(base + ["--sentence-corpus", "mobydick,bible"]) == 0
    df = pd.read_csv(out / "dirmag_damage.csv")
    assert len(df) == 2 * 2 and df["text_sha1"].nunique() == 2 and set(df["n_sentences"]) == {3}
