"""``tlgeo patching`` on a tiny model: what it prints and writes, and bad input before the model loads."""

import pandas as pd
import pytest

from tlgeo.cli import main


def test_patching_command(tmp_path, capsys):
    out = tmp_path / "pt"
    argv = [
        "patching",
        "--model",
        "tiny:llama",
        "--tasks",
        "induction,ioi",
        "--prompts",
        "4",
        "--min-accuracy",
        "0",
        "--components",
        "head,head_perp,self,nonself,mlp",
        "--exact-components",
        "head,self,nonself",
        "--out",
        str(out),
        "--threads",
        "1",
    ]
    assert main(argv) == 0
    captured = capsys.readouterr()
    printed = captured.out
    assert (
        " done" not in printed and "patching induction:" in captured.err
    )  # a progress bar per task, not a line per sweep
    assert "tasks (accuracy: share of clean prompts answered right):" in printed
    assert "largest effects" in printed and "attribution vs exact" in printed
    assert "head = self + nonself" in printed  # the interaction of the split's parts
    assert "warning: 4 prompts per task is below the prompt counts" in printed and "exact 16" in printed
    assert "rows with q < 0.05 (Benjamini-Hochberg" in printed and "min_q" in printed
    assert "head_par control" in printed and "randomly rotated write" in printed and "1/d_model 0.0156" in printed
    tasks = pd.read_csv(out / "patching_tasks.csv").set_index("task")
    assert tasks.loc["induction", "patched"] and not tasks.loc["ioi", "patched"]  # no single-token names
    effects = pd.read_csv(out / "patching_effects.csv")
    exact = effects[effects["method"] == "exact"]
    assert set(exact["component"]) == {"head", "self", "nonself"} and len(exact) == 3 * 3 * 4  # x blocks x heads
    assert {"patching_agreement.csv", "patching_interactions.csv", "patching.jsonl", "patching_par_baseline.csv"} <= {
        p.name for p in out.iterdir()
    }
    assert {"p", "q", "significant"} <= set(effects.columns) and (effects["q"] >= effects["p"]).all()
    excludes = ~((effects["ci_low"] <= 0) & (0 <= effects["ci_high"]))
    assert (excludes == (effects["p"] < 0.05)).all()  # one interval, one test
    family = effects.groupby(["method", "direction"])["family_size"]
    assert (family.nunique() == 1).all() and (family.first() == family.size()).all()
    top = printed.split("largest effects")[1].split("\n\n")[0]
    assert " p " in top.splitlines()[1] and " q" in top.splitlines()[1] and "up to" in top
    lines = (out / "patching.jsonl").read_text().count("\n")
    assert main(argv) == 0  # a rerun reads the log: nothing is added
    assert (out / "patching.jsonl").read_text().count("\n") == lines


def test_path_patching_command(tmp_path, capsys):
    out = tmp_path / "pp"
    argv = [
        "patching",
        "--model",
        "tiny:llama",
        "--tasks",
        "induction",
        "--prompts",
        "4",
        "--min-accuracy",
        "0",
        "--methods",
        "paths",
        "--path-senders",
        "L0H1,L1H2",
        "--path-receivers",
        "L2,logits",
        "--path-inputs",
        "k,v",
        "--out",
        str(out),
        "--threads",
        "1",
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "largest paths (a sender's change let through only to the receiver's input" in printed
    paths = pd.read_csv(out / "patching_paths.csv")
    # both sender blocks (a progress bar over the units once hid every block after the first)
    assert len(paths) == 2 * (4 * 2 + 1) and set(paths["receiver_input"]) == {"k", "v", "logits"}
    assert set(paths["sender_layer"]) == {0, 1}
    assert not (out / "patching_effects.csv").exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--methods", "paths", "--path-senders", "L0"], "paths needs path_senders and path_receivers"),
        (["--path-receivers", "L1H"], "path_receivers: 'L1H' is not a head"),
        (["--tasks", "copy"], "tasks: unknown value(s) ['copy']"),
        (["--components", "heads"], "components: unknown value(s) ['heads']"),
        (["--directions", "both"], "directions: unknown value(s) ['both']"),
        (["--prompts", "1"], "prompts must be >= 2"),
    ],
)
def test_bad_flags_fail_before_the_model_loads(flags, message, tmp_path, capsys, monkeypatch):
    import tlgeo.models as models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("the model loaded"))
    code = main(["patching", "--model", "tiny:llama", "--out", str(tmp_path), *flags])
    assert code == 2 and message in capsys.readouterr().err


def test_a_position_the_task_lacks_is_one_line_before_any_forward(tmp_path, capsys):
    code = main(
        [
            "patching",
            "--model",
            "tiny:llama",
            "--tasks",
            "induction",
            "--prompts",
            "4",
            "--positions",
            "S2",
            "--out",
            str(tmp_path),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "task 'induction' has no position 'S2'; choose from ['all', 'end']" in err
    assert "Traceback" not in err and not (tmp_path / "patching.jsonl").exists()


def test_the_peer_bench_finds_transformer_lens_s_effects(tmp_path):
    """scripts/bench_patching_peers.py on a tiny model: every method's effects against tlgeo's exact sweep (the
    peers it cannot import are skipped; TransformerLens's way always runs), in a table whose rows name their commit."""
    from tests.scripts import load_script
    from tlgeo.runner.provenance import read

    bench = load_script("bench_patching_peers")
    out = tmp_path / "peers"
    bench.main(
        [
            "--model",
            "tiny:llama",
            "--task",
            "induction",
            "--prompts",
            "4",
            "--every",
            "1",
            "--rounds",
            "1",
            "--threads",
            "1",
            "--out",
            str(out),
        ]
    )
    table = pd.read_csv(out / "peers.csv")
    rows = {r["method"]: r for _, r in table.iterrows()}
    assert {"tlgeo_exact", "tlgeo_attribution", "transformer_lens"} <= set(rows)
    assert rows["tlgeo_exact"]["x_tlgeo_exact"] == 1.0 and set(table["prompts"]) == {4} and set(table["heads"]) == {4}
    assert rows["transformer_lens"]["package"].startswith("transformer-lens==") and rows["tlgeo_exact"][
        "package"
    ].startswith("tlgeo==")
    (line,) = read(out)  # the commit on every row is the provenance line's
    assert set(table["commit"]) == {line["git"]["commit"]} and line["settings"]["task"] == "induction"
    assert all(rows[m]["max_abs_effect_diff"] < 1e-3 for m in rows if m != "tlgeo_attribution")


def test_a_rerun_that_no_longer_patches_a_task_removes_its_old_rows(tmp_path, capsys):
    """Issue 67: a finished run rerun into its folder with a ``--min-accuracy`` the model does not reach says "not
    patched" and leaves no effect, baseline or attention rows of that task behind, as a fresh folder has none."""
    out = tmp_path / "pt"
    argv = [
        "patching",
        "--model",
        "tiny:llama",
        "--tasks",
        "induction",
        "--prompts",
        "4",
        "--layers",
        "0,1",
        "--components",
        "head,head_par",
        "--out",
        str(out),
        "--threads",
        "1",
    ]
    assert main([*argv, "--min-accuracy", "0"]) == 0
    assert len(pd.read_csv(out / "patching_effects.csv")) > 0
    capsys.readouterr()
    assert main([*argv, "--min-accuracy", "1"]) == 0
    printed = capsys.readouterr().out
    assert not pd.read_csv(out / "patching_tasks.csv")["patched"].any()
    for name in (
        "patching_effects.csv",
        "patching_par_baseline.csv",
        "patching_attention.csv.gz",
        "patching_agreement.csv",
    ):
        assert len(pd.read_csv(out / name)) == 0, name
    assert "removed" in printed and str(out / "patching_effects.csv") in printed, printed


def test_layers_out_of_range_fail_before_the_weights_load_and_leave_no_folder(tmp_path, capsys, monkeypatch):
    """Issue 67: ``--layers`` beyond the model's blocks is one line from the model's config, before any weights
    load (it once loaded the zoo model, printed a header, then failed), and no --out folder is left behind."""
    from pathlib import Path

    import tlgeo.models as models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("the model loaded"))
    zoo = Path(__file__).resolve().parents[2] / "zoo" / "induction-llama"
    out = tmp_path / "new" / "pt"
    code = main(["patching", "--model", str(zoo), "--layers", "5-9", "--out", str(out), "--threads", "1"])
    captured = capsys.readouterr()
    assert code == 2 and captured.err.strip() == (
        "tlgeo patching: error: layers: layer(s) 5-9 out of range: the model has 2 layers (0..1)"
    ), captured.err
    assert captured.out == "" and not (tmp_path / "new").exists()
    code = main(
        [
            "patching",
            "--model",
            "tiny:llama",
            "--methods",
            "paths",
            "--path-senders",
            "L9H0",
            "--path-receivers",
            "logits",
            "--out",
            str(out),
        ]
    )
    assert code == 2 and "path_senders: block 9 out of range" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_a_damaged_table_is_refused_in_one_line_before_the_model_loads(tmp_path, capsys, monkeypatch):
    """Issue 67: a table in --out that does not read as tlgeo wrote it (here a row with a field too few, not at its
    end: no cut) is never merged: one line names it, before the model loads, and the file is left as it was."""
    import tlgeo.models as models

    out = tmp_path / "pt"
    out.mkdir()
    (out / "patching_tasks.csv").write_text("model,task,prompts\ntiny:llama,induction\ntiny:llama,ioi,4\n")
    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("the model loaded"))
    code = main(["patching", "--model", "tiny:llama", "--tasks", "induction", "--prompts", "4", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"{out / 'patching_tasks.csv'} does not read as the table tlgeo wrote" in err
    assert (out / "patching_tasks.csv").read_text() == "model,task,prompts\ntiny:llama,induction\ntiny:llama,ioi,4\n"
