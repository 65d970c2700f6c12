"""Patching on compiled tracr programs, whose every head and edge is known (``zoo/tracr-*/tracr.json``): the tasks'
answers are the programs' (checked against tracr's own decoded outputs), the compiled models do them, and exact head
patching through the patching analysis ranks the program's heads first."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from tlgeo.models import load_model
from tlgeo.patching.analysis import run
from tlgeo.patching.config import PatchingConfig
from tlgeo.patching.tasks import METRICS, TaskError, clean_accuracy
from tlgeo.patching.tasks.tracr import PROGRAMS, program_truth, tracr_task

ZOO = Path(__file__).resolve().parents[2] / "zoo"
NAMES = ["frac-prevs", "reverse", "hist", "sort", "detect-pattern"]


@pytest.mark.parametrize("name", NAMES)
def test_the_programs_answers_are_tracrs(name):
    """The tasks' answers (PROGRAMS, Python) equal what tracr's compiled model decoded at export, on every input."""
    truth = program_truth(ZOO / f"tracr-{name}")
    ref = np.load(ZOO / f"tracr-{name}" / "reference.npz")
    token = {i: v for v, i in truth["input_encoding"].items()}
    for row, decoded in zip(ref["tokens"], truth["reference"]["decoded"], strict=True):
        want = PROGRAMS[truth["program"]]([token[int(i)] for i in row if i >= 0][1:])
        if truth["output_kind"] == "numerical":
            np.testing.assert_allclose(want, decoded[1:], atol=1e-6)
        else:
            assert [str(w) for w in want] == decoded[1:]


@pytest.fixture(scope="module", params=NAMES)
def compiled(request):
    folder = ZOO / f"tracr-{request.param}"
    model = load_model(str(folder))
    return model, tracr_task(model.tokenizer, n=16, seed=0), json.loads((folder / "tracr.json").read_text())


def test_the_compiled_programs_do_their_tasks(compiled):
    model, task, truth = compiled
    assert task.n == 16 and task.clean.shape == (16, truth["max_seq_len"] + 1)
    assert (task.clean[:, 0] == truth["input_encoding"]["BOS"]).all() and not torch.equal(task.clean, task.corrupted)
    r = clean_accuracy(model, task)
    assert r["accuracy"] == 1.0 and r["corrupted_accuracy"] == 0.0 and r["clean_metric"] > r["corrupted_metric"]


def test_exact_head_patching_ranks_the_programs_heads_first(compiled):
    """Noising each head (the corrupted run's output patched into the clean run): only the program's heads move the
    answer, the one nearest the output by all of it. sort: both heads (the count of smaller keys, L1H0, and the
    aggregate by target position, L2H0); reverse: the aggregate L3H0 only, as its length head L0H0 counts the same
    length in both runs."""
    model, task, truth = compiled
    cfg = PatchingConfig(tasks=(task,), prompts=task.n, components=("head",), methods=("exact",), directions=("noise",))
    res = run(model, cfg)
    assert bool(res.tasks["patched"].iloc[0])
    effect = {(int(r.layer), int(r.head)): float(r.effect) for r in res.effects.itertuples()}
    assert len(effect) == model.cfg.n_layers * model.cfg.n_heads
    program = {(n["layer"], n["head"]) for n in truth["nodes"] if n["kind"] == "head"}
    moved = {h for h, e in effect.items() if abs(e) > 1e-6}
    ranked = sorted(effect, key=lambda h: -abs(effect[h]))
    expected = {
        "frac_prevs": {(1, 0)},
        "reverse": {(3, 0)},
        "hist": {(0, 0)},
        "sort": {(1, 0), (2, 0)},
        "detect_pattern": {(1, 0), (1, 1)},
    }
    assert moved <= program and moved == expected[truth["program"]] and set(ranked[: len(moved)]) == moved
    if truth["program"] == "detect_pattern":  # each prompt changes the token one of the two shift heads reads
        assert all(effect[h] > 0.2 for h in moved) and sum(effect[h] for h in moved) == pytest.approx(1.0, abs=1e-4)
    else:  # the last head of the program carries all of the answer
        assert ranked[0] == max(program) and effect[ranked[0]] == pytest.approx(1.0, abs=1e-4)


def test_the_value_metric_reads_a_numerical_output():
    out = torch.tensor([[0.25], [0.5]])
    got = METRICS["value"](out, torch.tensor([[0], [0]]), torch.tensor([[-1], [-1]]))
    assert got.tolist() == [0.25, 0.5]
    assert METRICS["value"](torch.tensor([[1.0, 3.0]]), torch.tensor([[1]]), torch.tensor([[0]])).tolist() == [2.0]


def test_a_folder_without_a_program_is_refused(tmp_path):
    with pytest.raises(TaskError, match="no tracr.json, so no compiled tracr program"):
        tracr_task(None, n=4, folder=tmp_path)


def test_tlgeo_patching_runs_on_a_compiled_program(tmp_path, capsys):
    """The command line: ``--tasks tracr`` builds the program's task from the model's folder, and the exact sweep
    ranks the pattern detector's two shift heads first (``detect_pattern``: L1H0 reads two tokens back, L1H1 one)."""
    from tlgeo.cli import main

    out = tmp_path / "tracr"
    argv = [
        "patching",
        "--model",
        str(ZOO / "tracr-detect-pattern"),
        "--tasks",
        "tracr",
        "--prompts",
        "16",
        "--components",
        "head",
        "--methods",
        "exact",
        "--directions",
        "noise",
        "--out",
        str(out),
        "--threads",
        "1",
    ]
    assert main(argv) == 0
    tasks = pd.read_csv(out / "patching_tasks.csv").set_index("task")
    assert tasks.loc["tracr", "patched"] and tasks.loc["tracr", "accuracy"] == 1.0
    effects = pd.read_csv(out / "patching_effects.csv").sort_values("effect", ascending=False)
    assert [(r.layer, r.head) for r in effects.head(2).itertuples()] == [(1, 0), (1, 1)]
    assert (effects.iloc[2:]["effect"].abs() < 1e-6).all()


def test_build_task_reads_the_program_from_the_models_folder(compiled):
    from tlgeo.patching.tasks import build_task

    model, task, truth = compiled
    built = build_task("tracr", model, n=16, seed=0)
    assert built.d_vocab == model.cfg.d_vocab and torch.equal(built.clean, task.clean)
    assert torch.equal(built.correct, task.correct) and built.metric == task.metric
