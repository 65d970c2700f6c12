"""The patching analysis on the contract: resume, tasks a model cannot do, bad input before any forward."""

import json

import pandas as pd
import pytest

from tlgeo.patching.analysis import LOG_KEY, run, units
from tlgeo.patching.config import PatchingConfig


def _cfg(**kw):
    base = dict(tasks=("induction",), prompts=4, min_accuracy=0.0, layers=(0, 1), n_boot=50,
                components=("head", "head_par", "mlp"))
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
    key = [k for k in LOG_KEY]
    changed = again.effects.set_index(key)["effect"] - whole.effects.set_index(key)["effect"]
    assert (changed != 0).sum() == 1


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
    for bad, match in ((dict(tasks=("copy",)), "tasks"), (dict(components=("heads",)), "components"),
                       (dict(prompts=1), "prompts"), (dict(min_accuracy=2.0), "min_accuracy"),
                       (dict(directions=("sideways",)), "directions")):
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
    late = {w.step: w for w in plan(shape, PatchingConfig(tasks=("ioi",), prompts=8, components=("head", "mlp"),
                                                         layers=(shape.n_layers - 1,)))}
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
