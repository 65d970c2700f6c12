"""The tlgeo command on a tiny model: outputs, resume, clear errors."""

import pytest

from tlgeo.cli import main


def test_listing_commands(capsys):
    assert main(["sites"]) == 0 and "value_excl_self" in capsys.readouterr().out
    assert main(["models"]) == 0 and "smollm2-135m" in capsys.readouterr().out


def _subparsers():
    import argparse

    from tlgeo.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return parser, sub.choices


def test_every_flag_has_help_and_help_shows_defaults():
    parser, commands = _subparsers()
    assert set(commands) == {
        "decompose",
        "profile",
        "ppl",
        "sweeps",
        "compare",
        "heads",
        "mlp-carrier",
        "closed-form",
        "audit",
        "atlas",
        "plan",
        "compression",
        "compress",
        "dirmag",
        "tokenwise",
        "pdsf",
        "patching",
        "circuit",
        "geometries",
        "train",
        "sites",
        "models",
    }
    for name, p in commands.items():
        for a in p._actions:
            if a.dest in ("help",):
                continue
            assert a.help and "``" not in a.help, f"tlgeo {name} {a.option_strings}: no help text"
    assert "``" not in parser.format_help()
    atlas_help = " ".join(commands["atlas"].format_help().split())
    limit = next(a for a in commands["atlas"]._actions if "--decomposition-zeroshot-limit" in a.option_strings)
    assert limit.help.startswith("first n items of each zero-shot task") and "[decomposition; default 20" in limit.help
    assert (
        "--decomposition-mlp-carrier-tokens" in atlas_help and "--decomposition-closed-form-tokens" in atlas_help
    )  # every step's budget is a flag


def test_version(capsys):
    import tlgeo

    assert main(["--version"]) == 0 and capsys.readouterr().out.strip() == f"tlgeo {tlgeo.__version__}"
    with pytest.raises(SystemExit) as e:  # with a command's flags: argparse's own answer
        main(["--version", "decompose"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"tlgeo {tlgeo.__version__}"


@pytest.mark.parametrize(
    "argv, flag, msg",
    [
        (["ppl", "--site", "attn", "--layers", "abc"], "--layers", "expected indices such as 3,5,10-12"),
        (["ppl", "--site", "attn", "--heads", "0,-1"], "--heads", "expected indices such as 3,5,10-12"),
        (["ppl", "--site", "attn", "--tokens", "-5"], "--tokens", "must be a positive integer (0 = all), got '-5'"),
        (["decompose", "--context", "0"], "--context", "must be a positive integer"),
        (["decompose", "--skip-first", "-1"], "--skip-first", "must be a non-negative integer"),
        (["profile", "--seq-len", "x"], "--seq-len", "must be a positive integer"),
        (
            ["atlas", "--decomposition-ruler-lengths", "1a"],
            "--decomposition-ruler-lengths",
            "expected a comma-separated list of int, got '1a'",
        ),
        (
            ["atlas", "--decomposition-zeroshot-limit", "-2"],
            "--decomposition-zeroshot-limit",
            "must be a non-negative integer",
        ),
        (["dirmag", "--seeds", "0"], "--seeds", "must be a positive integer, got '0'"),
        (["tokenwise", "--layers", "3-1"], "--layers", "expected indices such as 3,5,10-12"),
    ],
)
def test_bad_values_name_their_flag(argv, flag, msg, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"argument {flag}: {msg}" in err


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


def test_bad_placement_is_one_line_before_any_work(tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for argv, msg in (
        (["--device", "cuda"], "device 'cuda': CUDA is not available here"),
        (["--device", "gpu0"], "unknown device 'gpu0'"),
        (["--device-map", "{not json"], "--device-map: not a JSON object"),
    ):
        code = main(["ppl", "--model", "tiny:llama", "--site", "attn", "--out", str(tmp_path / "x"), *argv])
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and msg in err, err
        assert not any((tmp_path / "x").rglob("*"))  # nothing ran (the folder was made, checked writable)
    with pytest.raises(SystemExit):
        main(["ppl", "--site", "attn", "--max-memory", "0:20GiB"])
    assert "give DEVICE=SIZE" in capsys.readouterr().err


def test_a_kernel_missing_for_the_dtype_is_one_line(tmp_path, capsys, monkeypatch):
    from tlgeo.decomposition import cli as decomposition_cli

    def fails(*a, **k):
        raise RuntimeError("\"addmm_impl_cpu_\" not implemented for 'Half'\nmore lines")

    monkeypatch.setattr(decomposition_cli, "_run", fails)
    code = main(["ppl", "--model", "tiny:llama", "--site", "attn", "--dtype", "float16"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "not implemented for 'Half'" in err and "--dtype float16; use --dtype float32" in err
    monkeypatch.setattr(decomposition_cli, "_run", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("other")))
    with pytest.raises(RuntimeError, match="other"):  # any other failure keeps its traceback
        main(["ppl", "--model", "tiny:llama", "--site", "attn"])


@pytest.mark.parametrize(
    "error, says",
    [
        ("rank_failed", "error: a rank failed: rank 1: step audit: ValueError: bad."),
        ("gloo", "error: lost contact with the other ranks (one of them died?): [gloo] Connection closed by peer"),
    ],
)
def test_a_failed_or_lost_rank_is_one_line(error, says, capsys, monkeypatch):
    from tlgeo.decomposition import cli as decomposition_cli
    from tlgeo.runner.distributed import RankFailed

    def fails(*a, **k):
        if error == "rank_failed":
            raise RankFailed("rank 1: step audit: ValueError: bad")
        raise RuntimeError("[gloo] Connection closed by peer [127.0.0.1]:29500\nmore lines")

    monkeypatch.setattr(decomposition_cli, "_run", fails)
    code = main(["ppl", "--model", "tiny:llama", "--site", "attn"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1 and says in err and "Rerun the same command" in err


def test_ctrl_c_in_a_real_process(tmp_path):
    """SIGINT while a sweep runs (a process of its own, forked from a server with tlgeo imported): one line on
    stderr, no traceback, exit 130."""
    from tests.faults.kill import Case, run_once

    out = tmp_path / "sweeps"
    # the paper's full grids: ~90 points of 1,024 tokens, far more than the test waits for
    case = Case("sweeps", ("sweeps", "--model", "tiny:llama", "--tokens", "1024", "--context", "64"))
    r = run_once(case, out, interrupt_when=out / "sweeps.jsonl", expect_error=True, stdout=False)
    err = r.log
    lines = [l for l in err.replace("\r", "\n").splitlines() if l.strip() and "%|" not in l and "it/s" not in l]
    assert r.rc == 130, err[-2000:]
    assert "Traceback" not in err and len(lines) == 1, lines
    assert lines[0].startswith(f"tlgeo sweeps: interrupted. Saved in {out}: ") and "sweeps.jsonl" in lines[0]
    assert lines[0].endswith("Rerun the same command to resume.")
    named = lines[0].split(": ", 2)[2].split(". ")[0].split(", ")
    assert all((out / n).exists() for n in named), named  # every file named exists


@pytest.mark.parametrize(
    "command", [["decompose"], ["ppl", "--site", "attn"], ["dirmag"], ["tokenwise"], ["pdsf"], ["atlas"]]
)
def test_an_out_that_cannot_be_written_fails_before_the_model_loads(command, tmp_path, capsys, monkeypatch):
    import tlgeo.models

    monkeypatch.setattr(tlgeo.models, "load_model", lambda *a, **k: pytest.fail("loaded the model first"))
    blocker = tmp_path / "a-file"
    blocker.write_text("x")  # a folder cannot be made inside a file
    code = main([*command, "--model", "tiny:llama", "--out", str(blocker / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and f"--out {blocker / 'out'}: cannot write there" in err


def test_descriptions_name_only_flags_their_command_has():
    import re

    from tlgeo.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "cmd")
    for name, p in sub.choices.items():
        if name == "plan":  # its example names the planned command's flags
            continue
        flags = {o for a in p._actions for o in a.option_strings}
        named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", p.description or ""))
        assert named <= flags, f"tlgeo {name}'s description names {sorted(named - flags)}, which it lacks"


@pytest.mark.parametrize("flags, msg", [(["--layers", "5-40"], "layer"), (["--heads", "12"], "head")])
def test_ppl_layers_and_heads_fail_from_the_config_before_the_model_loads(flags, msg, tmp_path, capsys, monkeypatch):
    import tlgeo.models

    monkeypatch.setattr(tlgeo.models, "load_model", lambda *a, **k: pytest.fail("loaded the model first"))
    code = main(["ppl", "--model", "tiny:llama", "--site", "value_excl_self", "--out", str(tmp_path), *flags])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and msg in err.lower(), err


def test_ctrl_c_under_torchrun_names_each_rank_folder_once_from_rank_0(tmp_path, capsys, monkeypatch):
    from tlgeo import cli
    from tlgeo.runner.cliargs import RunRecord

    record = RunRecord(tmp_path)
    for name in (
        "patching_tasks.csv",
        "ranks/0-of-2/patching.jsonl",
        "ranks/1-of-2/patching.jsonl",
        "ranks/1-of-2/patching_effects.csv",
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    assert record.saved() == (
        f"Saved in {tmp_path}: patching_tasks.csv, ranks/0-of-2 (1 file), ranks/1-of-2 (2 files)."
    )

    def interrupted(args):
        args.record.out = tmp_path
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", lambda: _parser_running(interrupted))
    for rank, says in (("1", False), ("0", True)):  # every rank is interrupted: rank 0 says it, once
        monkeypatch.setenv("RANK", rank)
        assert main(["x"]) == 130
        err = capsys.readouterr().err
        assert ("interrupted. Saved in" in err) == says and err.count("ranks/1-of-2 (2 files)") == says


def _parser_running(fn):
    import argparse

    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd")
    sub.add_parser("x").set_defaults(_run=fn)
    return p


def test_a_layer_range_beyond_the_model_is_one_short_line(capsys):
    code = main(["ppl", "--model", "tiny:llama", "--site", "attn", "--layers", "1-400", "--out", "/tmp/never-written"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == "tlgeo ppl: error: layer(s) 3-400 out of range: the model has 3 layers (0..2)"


def test_a_bug_keeps_its_traceback_and_a_users_mistake_is_one_line(monkeypatch, capsys, tmp_path):
    """A KeyError or IndexError that is not a UserError, or a ValueError raised inside a library, is a bug: it
    leaves main with its traceback instead of passing for bad input; a ValueError of tlgeo's own checks is one
    line."""
    import pandas as pd

    import tlgeo.decomposition.cli as decomposition_cli

    def lookup_bug(*a, **k):
        return {}["damage_summary"]

    def library_bug(*a, **k):
        return pd.DataFrame({"a": [1]}).astype({"a": "no such dtype"})

    argv = ["ppl", "--model", "tiny:llama", "--site", "attn", "--out", str(tmp_path)]
    for fn, raised in ((lookup_bug, KeyError), (library_bug, TypeError), (lambda *a, **k: [][1], IndexError)):
        monkeypatch.setattr(decomposition_cli, "_run", fn)
        with pytest.raises(raised):
            main(argv)
    monkeypatch.setattr(decomposition_cli, "_run", lambda *a, **k: pd.to_datetime("not a date at all"))
    with pytest.raises(ValueError):  # raised by pandas: a bug of the caller, shown whole
        main(argv)
    monkeypatch.undo()
    assert main([*argv, "--corpus", "nonesuch"]) == 2  # tlgeo.data's check of the corpus name: one line
    err = capsys.readouterr().err.strip()
    assert err.startswith("tlgeo ppl: error: unknown corpus 'nonesuch'") and "\n" not in err


def test_an_unknown_model_is_one_line_and_leaves_no_folder(tmp_path, capsys, monkeypatch):
    """Issue 67: an unknown model fails in one line and leaves no output folder (``runs/<model>`` once stayed)."""
    monkeypatch.chdir(tmp_path)
    code = main(["ppl", "--model", "no-such-model-xyz", "--site", "attn"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "unknown model 'no-such-model-xyz'" in err, err
    assert not (tmp_path / "runs").exists()
    code = main(["ppl", "--model", "tiny:nosuchkind", "--site", "attn", "--out", str(tmp_path / "a" / "b")])
    assert code == 2 and "nosuchkind" in capsys.readouterr().err and not (tmp_path / "a").exists()


def test_main_decides_by_the_errors_type_never_by_the_file_it_came_from(monkeypatch, capsys, tmp_path):
    """A ValueError that is no UserError keeps its traceback even when raised in tlgeo's own files; a UserError
    is one line and exit 2 even when raised inside a library's file; main reads no traceback."""
    import inspect
    from pathlib import Path

    import pandas as pd

    import tlgeo.cli
    import tlgeo.decomposition.cli as decomposition_cli
    from tlgeo.errors import InputError, UserError

    def raiser(error: BaseException, filename: str):
        """A ``_run`` whose frame is in ``filename`` (as if that file raised ``error``)."""
        space = {"error": error}
        exec(compile("def run(*a, **k):\n    raise error\n", filename, "exec"), space)
        return space["run"]

    ours = str(Path(tlgeo.cli.__file__).resolve().parent / "decomposition" / "cli.py")
    library = str(Path(pd.__file__).resolve().parent / "core" / "frame.py")
    argv = ["ppl", "--model", "tiny:llama", "--site", "attn", "--out", str(tmp_path)]
    monkeypatch.setattr(decomposition_cli, "_run", raiser(ValueError("an internal check failed"), ours))
    with pytest.raises(ValueError, match="an internal check failed"):
        main(argv)
    said = "the value 7 of --thing is too big"
    for error in (UserError(said), InputError(said)):
        monkeypatch.setattr(decomposition_cli, "_run", raiser(error, library))
        assert main(argv) == 2
        assert capsys.readouterr().err == f"tlgeo ppl: error: {said}\n"
    source = inspect.getsource(tlgeo.cli)
    looks = ("__traceback__", "import traceback", "extract_tb", "tb_frame", "co_filename")
    assert not [w for w in looks if w in source], "main reads where an error was raised"


@pytest.mark.parametrize(
    "command, message",
    [
        (["dirmag", "--layers", "7"], "layer(s) 7 out of range: the model has 3 layers (0..2)"),
        (["dirmag", "--probe-layers", "0,5"], "probe layers [5] out of range: the model has blocks 0..2"),
        (["tokenwise", "--layers", "0,3"], "layers [3] out of range: the pool has layer maps 0..2"),
        (["pdsf", "--layers", "0,4"], "layers [4] out of range: the states are 0..3"),
    ],
)
def test_layers_out_of_range_fail_from_the_config_before_the_model_loads(
    command, message, tmp_path, capsys, monkeypatch
):
    """Every command checks its config against the model's shape read from its config (``Config.check_shape``),
    before the weights load and before its --out folder is made."""
    import tlgeo.models

    monkeypatch.setattr(tlgeo.models, "load_model", lambda *a, **k: pytest.fail("loaded the model first"))
    out = tmp_path / "new" / "out"
    code = main([*command, "--model", "tiny:llama", "--out", str(out), "--threads", "1"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "new").exists()


def test_a_progress_bar_cut_off_by_ctrl_c_says_nothing_at_exit(monkeypatch):
    """Ctrl-C inside tqdm's constructor leaves a bar whose destructor fails (no ``pos``): after an interrupt that
    is not printed (the command's one line stays its only one); another object's failure still is."""
    import sys
    from types import SimpleNamespace

    from tqdm import tqdm

    from tlgeo.cli import _quiet_half_made_progress_bars

    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.object))
    _quiet_half_made_progress_bars()
    bar = SimpleNamespace(exc_type=AttributeError, exc_value=AttributeError("'tqdm' object has no attribute 'pos'"))
    sys.unraisablehook(SimpleNamespace(**vars(bar), object=tqdm.__del__))

    class Other:
        def __del__(self):
            pass

    sys.unraisablehook(SimpleNamespace(**vars(bar), object=Other.__del__))
    sys.unraisablehook(SimpleNamespace(exc_type=ValueError, exc_value=ValueError("x"), object=tqdm.__del__))
    assert seen == [Other.__del__, tqdm.__del__]  # the bar's AttributeError said nothing; the others passed on
