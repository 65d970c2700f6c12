"""The patching analysis on the contract: resume, tasks a model cannot do, bad input before any forward."""

import json

import pandas as pd
import pytest

from tlgeo.patching import analysis as patching_analysis
from tlgeo.patching.analysis import LOG_KEY, run, units
from tlgeo.patching.config import PatchingConfig
from tlgeo.patching.paths import path_effects, path_runs, path_sweep
from tlgeo.patching.tasks import build_task


def _cfg(**kw):
    base = dict(
        tasks=("induction",), prompts=4, min_accuracy=0.0, layers=(0, 1), components=("head", "head_par", "mlp")
    )
    return PatchingConfig(**{**base, **kw})


def test_units_cover_attribution_and_every_exact_block(llama):
    cfg = _cfg(directions=("denoise", "noise"))
    got = units(llama, cfg)
    assert ("attribution", "induction", "noise") in got
    assert sum(u[0] == "exact" for u in got) == 2 * 3 * 2  # directions x components x layers


def test_a_run_resumes_from_its_log_and_gives_the_same_tables(llama, tmp_path):
    cfg = _cfg()
    whole = run(llama, cfg, out=tmp_path / "a")
    lines = (tmp_path / "a" / "patching.jsonl").read_text().splitlines()
    n_rows = len(whole.effects)
    assert len(lines) == n_rows  # one log row per (method, component, layer, head)
    # a run killed halfway: its log holds the first units only (and a torn line)
    part = tmp_path / "b"
    part.mkdir()
    (part / "patching.jsonl").write_text("\n".join(lines[: n_rows // 2]) + "\n" + lines[n_rows // 2][:20])
    resumed = run(llama, cfg, out=part)
    pd.testing.assert_frame_equal(resumed.effects, whole.effects)
    # a finished run is read back, not recomputed: a changed log row shows up in the table
    row = json.loads(lines[0])
    row["patched"] = [x + 1.0 for x in row["patched"]]
    (tmp_path / "a" / "patching.jsonl").write_text("\n".join([json.dumps(row), *lines[1:]]) + "\n")
    again = run(llama, cfg, out=tmp_path / "a")
    key = [k for k in LOG_KEY if k != "inputs"]
    changed = again.effects.set_index(key)["effect"] - whole.effects.set_index(key)["effect"]
    assert (changed != 0).sum() == 1


def _own_task(seed: int, length: int):
    """A task of one's own named "capitals": 8 prompts of random token ids, their answers drawn too."""
    import torch

    from tlgeo.patching.tasks import Task

    g = torch.Generator().manual_seed(seed)
    clean = torch.randint(1, 200, (8, length), generator=g)
    corrupted = clean.clone()
    corrupted[:, 1] = torch.randint(1, 200, (8,), generator=g)
    correct = torch.randint(1, 200, (8, 1), generator=g)
    return Task("capitals", clean, corrupted, correct, correct % 199 + 1)


def test_a_task_rerun_under_its_name_with_other_prompts_is_computed_again(llama, tmp_path, capsys):
    """Run as a new user did: a task of one's own, then the same name with other prompts (7 tokens instead of
    9) into the same folder. The second run's numbers are a fresh run's, not the old patched metrics divided
    by the new gap, and the run says that it recomputed them."""
    first, second = _own_task(0, 9), _own_task(1, 7)
    cfg = _cfg(tasks=(first,), methods=("exact",), components=("head",))
    assert run(llama, cfg, out=tmp_path / "same").tasks["patched"].all()
    capsys.readouterr()
    again = run(llama, cfg.replace(tasks=(second,)), out=tmp_path / "same")
    said = capsys.readouterr().out.splitlines()
    fresh = run(llama, cfg.replace(tasks=(second,)), out=tmp_path / "fresh")
    pd.testing.assert_frame_equal(again.effects, fresh.effects)
    saved = pd.read_csv(tmp_path / "same" / "patching_effects.csv")
    assert len(saved) == len(fresh.effects)  # the old prompts' rows replaced, not kept beside the new ones
    assert [line for line in said if line.startswith("recomputed")], said
    assert not [line for line in said if line.startswith("resumed")], said
    assert again.tasks["inputs"].iloc[0] != run(llama, cfg, out=tmp_path / "same").tasks["inputs"].iloc[0]
    # the same content again is read back, not recomputed
    capsys.readouterr()
    run(llama, cfg.replace(tasks=(second,)), out=tmp_path / "same")
    said = capsys.readouterr().out.splitlines()
    assert [line for line in said if line.startswith("resumed")] and not [
        line for line in said if line.startswith("recomputed")
    ], said


def test_a_task_the_model_cannot_do_is_reported_not_patched(llama):
    res = run(llama, _cfg(min_accuracy=1.0))
    assert not res.tasks["patched"].iloc[0]
    assert "does not do the task" in res.tasks["reason"].iloc[0]
    assert res.effects.empty
    res = run(llama, _cfg(tasks=("ioi",)))  # a byte tokenizer has no single-token names
    assert not res.tasks["patched"].iloc[0] and "single-token" in res.tasks["reason"].iloc[0]


def test_bad_input_fails_before_any_forward(llama, monkeypatch):
    import tlgeo.patching.analysis as analysis

    def no_forward(*a, **k):
        raise AssertionError("a forward ran")

    monkeypatch.setattr(analysis, "task_runs", no_forward)
    with pytest.raises(ValueError, match="no position 'S2'"):
        run(llama, _cfg(positions="S2"))
    for bad, match in (
        (dict(tasks=("copy",)), "tasks"),
        (dict(components=("heads",)), "components"),
        (dict(prompts=1), "prompts"),
        (dict(min_accuracy=2.0), "min_accuracy"),
        (dict(directions=("sideways",)), "directions"),
    ):
        with pytest.raises(ValueError, match=match):
            _cfg(**bad)
    with pytest.raises(IndexError, match="out of range"):
        run(llama, _cfg(layers=(0, 9)))


def test_a_model_whose_heads_do_not_add_up_skips_their_write_parts(llama, monkeypatch):
    """Where a norm follows W_O (Gemma 2 and 3) a head's residual write is not its own: head_par and
    head_perp are left out, with the reason in the tasks table, and the rest is patched."""
    import tlgeo.patching.analysis as analysis
    import tlgeo.patching.runs as runs_mod

    def not_separable(model, runs, layers):
        raise ValueError("block 0: the attention output is not the sum of the heads' writes z W_O")

    monkeypatch.setattr(analysis, "check_separable_heads", not_separable)
    monkeypatch.setattr(runs_mod, "check_separable_heads", not_separable)
    res = run(llama, _cfg())
    assert set(res.effects["component"]) == {"head", "mlp"}
    assert "head_par and head_perp not patched" in res.tasks["note"].iloc[0]
    assert res.par_baseline is not None and res.par_baseline.empty  # nor their control: the same reason
    with pytest.raises(ValueError, match="not the sum"):  # asked for directly, they are refused
        from tlgeo.patching.exact import exact_sweep
        from tlgeo.patching.runs import task_runs
        from tlgeo.patching.tasks import build_task

        task = build_task("induction", llama, n=2)
        exact_sweep(llama, task_runs(llama, task, ["head_par"], [0]), ["head_par"], layers=[0])


def test_the_plan_counts_the_exact_sweep_by_resumed_blocks():
    from tlgeo.patching.analysis import PROMPT_TOKENS, plan
    from tlgeo.planner import model_shape

    shape = model_shape("tiny:llama")
    full = {w.step: w for w in plan(shape, PatchingConfig(tasks=("ioi",), prompts=8, components=("head", "mlp")))}
    late = {
        w.step: w
        for w in plan(
            shape, PatchingConfig(tasks=("ioi",), prompts=8, components=("head", "mlp"), layers=(shape.n_layers - 1,))
        )
    }
    n, L = shape.n_layers, PROMPT_TOKENS["ioi"]
    per_block = (shape.n_heads + 1) * 8 * L  # one copy of the prompts per head, and one for the MLP
    assert full["ioi: exact"].tokens == int(per_block * sum((n - l) / n for l in range(n)))
    assert abs(late["ioi: exact"].tokens - per_block / n) <= 1  # the last block alone: 1/n of a forward
    assert full["ioi: attribution"].tokens == 3 * 8 * L and full["ioi: clean + corrupted"].kept_bytes > 0


def test_the_tasks_table_comes_from_the_cached_runs_and_equals_clean_accuracy(llama):
    """The accuracy check reuses the clean and corrupted runs the patching caches (no extra forwards)."""
    from tlgeo.patching.tasks import build_task, clean_accuracy

    res = run(llama, _cfg())
    row = res.tasks.iloc[0]
    want = clean_accuracy(llama, build_task("induction", llama, n=4), batch_size=3)
    for k in ("accuracy", "corrupted_accuracy", "clean_metric", "corrupted_metric"):
        assert row[k] == pytest.approx(want[k], abs=1e-5), k


def test_your_own_task_is_patched_as_a_built_in_one(llama, tmp_path):
    """A Task object in ``tasks`` runs the same pipeline: its effects are the built-in task's on the same
    prompts; agreement and the plots read its table."""
    from dataclasses import replace

    from tlgeo.patching import task_from_texts  # noqa: F401 - importable from the package
    from tlgeo.patching.effects import agreement
    from tlgeo.patching.plots import plot_effects
    from tlgeo.patching.tasks import build_task

    mine = replace(build_task("induction", llama, n=4), name="my_induction")
    own, built = run(llama, _cfg(tasks=(mine,)), out=tmp_path), run(llama, _cfg())
    assert own.tasks["patched"].all() and set(own.effects["task"]) == {"my_induction"}
    cols = ["method", "component", "layer", "head", "effect", "ci_low", "ci_high", "p"]
    pd.testing.assert_frame_equal(own.effects[cols], built.effects[cols])
    assert (own.effects["prompts"] == 4).all() and len(agreement(own.effects)) > 0
    plot_effects(own.effects, "my_induction", method="attribution")
    assert (tmp_path / "patching_effects.csv").exists()
    # its section in the atlas, drawn from the saved tables alone (no model, no task rebuilt by its name)
    from tlgeo.runner.analysis import StepContext
    from tlgeo.patching.analysis import PatchingResult
    from tlgeo.patching.plots import head_attention_rows, top_heads
    from tlgeo.report.html import Report
    from tlgeo.report.registry import load_steps

    saved = PatchingResult.load(tmp_path)
    top = top_heads(saved.effects, "my_induction", method="exact")
    views = saved.attention.set_index(["view", "query", "key"])["weight"]
    want = head_attention_rows(llama, mine.clean[:1], zip(top["layer"], top["head"])).set_index(
        ["view", "query", "key"]
    )["weight"]
    pd.testing.assert_series_equal(views.loc[want.index], want, rtol=1e-6)  # the clean pattern of its top heads
    report = Report("patching")
    load_steps()["patching"].render(StepContext(None, report, None, _cfg(tasks=(mine,))), saved)
    assert "my_induction: clean attention of the heads with the largest exact effect" in report.html()
    with pytest.raises(ValueError, match="named 'induction', as a built-in task"):
        _cfg(tasks=(replace(mine, name="induction"),))
    with pytest.raises(ValueError, match="two tasks named alike"):
        _cfg(tasks=(mine, mine))
    with pytest.raises(ValueError, match=r"tasks: unknown value\(s\) \[3\]"):
        _cfg(tasks=(3,))


def test_a_task_the_model_does_not_do_warns_in_python(llama):
    with pytest.warns(UserWarning, match="task 'induction' not patched: clean accuracy 0.00 < min_accuracy 0.99"):
        res = run(llama, _cfg(min_accuracy=0.99, methods=("attribution",)))
    assert not res.tasks["patched"].any() and res.effects.empty


def test_every_bad_prompt_of_a_task_is_named_at_once(llama):
    from tlgeo.patching import TaskError, task_from_texts

    with pytest.raises(TaskError) as e:  # a byte tokenizer: a word is many tokens
        task_from_texts(llama, "t", ["ab", "abc"], ["ab", "abcd"], [" x", "y"], ["z", " w"])
    msg = str(e.value)
    assert "prompt 1 has 4 tokens clean" in msg and "correct answer ' x' of prompt 0" in msg
    assert "wrong answer ' w' of prompt 1" in msg and "prompt 0 has" not in msg


def test_a_component_not_cached_is_one_line(llama):
    from tlgeo.patching import exact_sweep, task_runs
    from tlgeo.patching.tasks import build_task

    runs = task_runs(llama, build_task("induction", llama, n=4), ["head"], [0])
    with pytest.raises(ValueError, match=r"did not cache mlp at block 0, head at block 1, mlp at block 1: make them"):
        exact_sweep(llama, runs, ["head", "mlp"], layers=[0, 1])


def test_path_patching_in_the_analysis_is_the_sweep_and_resumes_from_its_log(llama, tmp_path, monkeypatch):
    cfg = _cfg(
        methods=("paths",),
        path_senders=("L0H1", "L1"),
        path_receivers=("L2H0", "logits"),
        path_components=("head", "nonself"),
    )
    assert sum(u[0] == "paths" for u in units(llama, cfg)) == 2 * 2  # components x sender blocks
    res = run(llama, cfg, out=tmp_path)
    assert res.effects is None and res.par_baseline is None and len(res.paths) == 2 * 5 * 4
    task = build_task("induction", llama, n=4, seed=0)
    runs = path_runs(llama, task, ["head", "nonself"], [0, 1], [2], logits=True)
    senders = [(0, 1), *((1, h) for h in range(llama.cfg.n_heads))]
    want = path_effects(path_sweep(llama, runs, senders, [(2, 0)], components=["head", "nonself"], logits=True), runs)
    key = ["component", "sender_layer", "sender_head", "receiver_layer", "receiver_head", "receiver_input"]
    got = res.paths.sort_values(key).reset_index(drop=True)
    want = want.sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(got[key + ["effect", "p"]], want[key + ["effect", "p"]], check_dtype=False)
    assert (got["q"] >= got["p"] - 1e-12).all()
    monkeypatch.setattr(patching_analysis, "path_sweep", lambda *a, **k: pytest.fail("recomputed"))
    again = run(llama, cfg, out=tmp_path)  # read back from patching_paths.jsonl
    pd.testing.assert_frame_equal(again.paths, res.paths)


def test_path_patching_needs_its_senders_and_receivers_in_a_form_it_reads():
    with pytest.raises(ValueError, match="paths needs path_senders and path_receivers"):
        _cfg(methods=("paths",), path_senders=("L0",))
    with pytest.raises(ValueError, match="path_senders: 'X1' is not a head"):
        _cfg(methods=("paths",), path_senders=("X1",), path_receivers=("L1",))
    with pytest.raises(ValueError, match="path_senders: 'logits' is not a head"):
        _cfg(methods=("paths",), path_senders=("logits",), path_receivers=("L1",))


def test_a_task_rerun_whose_new_prompts_are_not_patched_leaves_no_rows_of_the_old_ones(llama, tmp_path, capsys):
    """Issue 67: a task of one's own rerun under its name with other prompts that the model does not do (below
    ``min_accuracy``) is "not patched" in the tasks table, and the effects, baseline and attention rows of its
    earlier prompts are removed, as a fresh folder has none; the run says so. Rows of another task stay."""
    first, second = _own_task(0, 9), _own_task(1, 7)
    other = _own_task(2, 8)
    other = type(other)("kept", other.clean, other.corrupted, other.correct, other.wrong)
    cfg = _cfg(tasks=(first, other), methods=("exact",), components=("head", "head_par"))
    out = tmp_path / "same"
    assert run(llama, cfg, out=out).tasks["patched"].all()
    kept = {
        f: pd.read_csv(out / f).query("task == 'kept'")
        for f in ("patching_effects.csv", "patching_par_baseline.csv", "patching_attention.csv.gz")
    }
    assert all(len(df) for df in kept.values())
    capsys.readouterr()
    with pytest.warns(UserWarning, match="not patched"):
        again = run(llama, cfg.replace(tasks=(second,), min_accuracy=1.0), out=out, progress=False)
    said = capsys.readouterr().out
    assert not again.tasks["patched"].any()
    for f, df in kept.items():
        saved = pd.read_csv(out / f)
        assert set(saved["task"]) == {"kept"}, f  # no row of the earlier "capitals" prompts
        pd.testing.assert_frame_equal(saved.reset_index(drop=True), df.reset_index(drop=True))
    assert "removed" in said and "patching_effects.csv" in said and "capitals" in said, said
    tasks = pd.read_csv(out / "patching_tasks.csv").set_index("task")
    assert not tasks.loc["capitals", "patched"] and tasks.loc["kept", "patched"]
    # the same prompts again, patched this time: rows of these inputs only
    run(llama, cfg.replace(tasks=(second,)), out=out)
    fresh = run(llama, cfg.replace(tasks=(second,)), out=tmp_path / "fresh")
    saved = pd.read_csv(out / "patching_effects.csv").query("task == 'capitals'")
    assert len(saved) == len(fresh.effects)


def test_a_python_run_of_your_own_task_records_a_command_that_reruns_it(llama, tmp_path, capsys, monkeypatch):
    """Issue 67: ``run(model, PatchingConfig(tasks=(task_from_texts(...),)), out=...)`` writes the task beside the
    tables and records a command line that reads it, so that scripts/reproduce.py reruns the folder to equal
    tables (it once recorded ``--tasks Task('myrep', ...`` and failed)."""
    from tests.scripts import load_script
    from tlgeo.cli import main
    from tlgeo.patching import task_from_texts
    from tlgeo.runner.provenance import read

    mine = task_from_texts(
        llama,
        "my rep",
        ["abcab", "cdacd", "bdcbd", "adbad"],
        ["abcax", "cdacx", "bdcbx", "adbax"],
        ["c", "a", "c", "b"],
        ["x", "x", "x", "x"],
    )
    cfg = _cfg(tasks=("induction", mine), methods=("exact",), components=("head",))
    made = tmp_path / "api"
    run(llama, cfg, out=made)
    (line,) = read(made)
    argv = line["argv"]
    assert argv is not None and argv[0] == "patching", line["command"]
    tasks = argv[argv.index("--tasks") + 1]
    assert tasks == f"induction,{made / 'patching_task_my_rep.json'}", tasks
    reproduce = load_script("reproduce")
    monkeypatch.setattr(reproduce, "rerun", main)  # in-process: no second import of torch
    capsys.readouterr()
    assert reproduce.main([str(made), "--out", str(tmp_path / "again")]) == 0
    assert "0 differ" in capsys.readouterr().out
    for name in ("patching_tasks.csv", "patching_effects.csv"):
        a, b = pd.read_csv(made / name), pd.read_csv(tmp_path / "again" / name)
        assert set(b["task"]) == {"induction", "my rep"}
        pd.testing.assert_frame_equal(a, b)
    moved = made.rename(tmp_path / "moved")  # the folder moved: its task file is found in it
    capsys.readouterr()
    assert reproduce.main([str(moved), "--out", str(tmp_path / "third")]) == 0
    assert "0 differ" in capsys.readouterr().out


def test_a_task_file_is_checked_when_the_config_is_made(tmp_path):
    from tlgeo.patching.tasks.custom import load_task, save_task

    with pytest.raises(ValueError, match="tasks: no task file"):
        _cfg(tasks=("induction", str(tmp_path / "nowhere.json")))
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="does not hold a task"):
        _cfg(tasks=(str(tmp_path / "bad.json"),))
    mine = _own_task(0, 5)
    back = load_task(save_task(mine, tmp_path / "t.json"))
    assert patching_analysis.task_digest(back) == patching_analysis.task_digest(mine)
