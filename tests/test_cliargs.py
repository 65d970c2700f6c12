"""Shared command-line pieces: flags generated from a config, the interrupt record."""

import argparse
import os
import re
import time
from dataclasses import dataclass

import pytest

from tlgeo.runner.analysis import Config, param
from tlgeo.runner.cliargs import Formatter, RunRecord, add_config_args, config_from_args, default_out


@dataclass(frozen=True)
class Toy(Config):
    tokens: int = param(0, "tokens (0 = all)", min=0)
    seeds: int = param(2, "seeds")
    kinds: tuple[str, ...] = param(("a", "b"), "kinds", choices=("a", "b", "c"))
    layers: tuple[int, ...] | None = param(None, "blocks", indices=True)
    mode: str = param("x", "mode", choices=("x", "y"))
    faithful: bool = param(False, "the authors' way")
    hidden: int = param(3, "not a flag", cli=False)

    def validate(self) -> None:
        self._check_choices()


def _parser():
    p = argparse.ArgumentParser(formatter_class=Formatter)
    add_config_args(p, Toy)
    return p


def test_flags_follow_the_fields_and_their_defaults():
    p = _parser()
    cfg = config_from_args(Toy, p.parse_args([]))
    assert cfg == Toy()
    cfg = config_from_args(
        Toy, p.parse_args(["--tokens", "0", "--kinds", "c", "--layers", "1,3-4", "--mode", "y", "--faithful"])
    )
    assert cfg == Toy(tokens=0, kinds=("c",), layers=(1, 3, 4), mode="y", faithful=True)
    assert "--hidden" not in p.format_help()
    text = " ".join(p.format_help().split())
    assert "kinds (default: a,b)" in text and "('a', 'b')" not in text  # lists as typed, not as tuples


@pytest.mark.parametrize(
    "argv, msg",
    [
        (["--seeds", "0"], "argument --seeds: must be a positive integer, got '0'"),
        (["--tokens", "-1"], "argument --tokens: must be a non-negative integer"),
        (["--mode", "z"], "argument --mode: invalid choice: 'z'"),
        (["--layers", "x"], "argument --layers: expected indices"),
    ],
)
def test_bad_flags_name_themselves(argv, msg, capsys):
    with pytest.raises(SystemExit):
        _parser().parse_args(argv)
    assert msg in capsys.readouterr().err


def test_config_checks_list_items_once_made():
    with pytest.raises(ValueError, match=r"kinds: unknown value\(s\) \['d'\]"):
        config_from_args(Toy, _parser().parse_args(["--kinds", "a,d"]))


def test_run_record_names_only_files_this_run_wrote(tmp_path):
    old = tmp_path / "old.csv"
    old.write_text("x\n")
    past = time.time() - 3600
    os.utime(old, (past, past))
    rec = RunRecord(tmp_path / "missing")
    assert rec.saved() == "Nothing was saved yet."
    rec.out = tmp_path
    assert rec.saved() == "Nothing was saved yet."  # an older file is not this run's
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.jsonl").write_text("{}\n")
    (tmp_path / "b.csv.tmp").write_text("")  # a half-written file is not saved
    assert rec.saved() == f"Saved in {tmp_path}: logs/a.jsonl."  # its path under the folder


def test_default_output_is_never_the_committed_results(monkeypatch):
    monkeypatch.delenv("TLGEO_RUNS", raising=False)
    assert default_out("x").parts[0] == "runs"
    monkeypatch.setenv("TLGEO_RUNS", "/tmp/elsewhere")
    assert str(default_out("x")) == "/tmp/elsewhere/x"


# a timing that holds on one machine only: "3 s", "~0.15 sec", "2 min", "2-core", "this CPU", a date
MACHINE_TIMING = re.compile(
    r"\d\s*(?:s|secs?|seconds?|mins?|minutes?)\b|\b\d+-core\b|\bthis (?:cpu|machine)\b"
    r"|\b20\d\d-\d\d",
    re.IGNORECASE,
)


def _config_classes() -> list[type]:
    """Every Config subclass the registered analyses and commands define (those of ``tlgeo compress`` too)."""
    seen, todo = [], list(Config.__subclasses__())
    while todo:
        c = todo.pop()
        if c not in seen:
            seen.append(c)
            todo += c.__subclasses__()
    return seen


def _shown_texts() -> dict[str, str]:
    """Every ``help`` and ``cost`` of every analysis's config fields and every atlas budget, and every
    command's description and flag help as ``tlgeo <command> --help`` shows them, by where they are."""
    import dataclasses

    from tlgeo.runner.analysis import analyses, budget_fields
    from tlgeo.cli import build_parser
    from tlgeo.report.registry import load_analyses, load_commands, load_steps

    load_analyses(), load_commands(), load_steps()
    assert analyses() and budget_fields()
    out = {}
    configs = {a.config for a in analyses().values()} | set(_config_classes())
    for cls in configs:
        for f in dataclasses.fields(cls):
            for key in ("help", "cost"):
                out[f"{cls.__name__}.{f.name} {key}"] = str(f.metadata.get(key, ""))
    for name, (chapter, f) in budget_fields().items():
        for key in ("help", "cost"):
            out[f"atlas budget {name} ({chapter}) {key}"] = str(f.metadata.get(key, ""))
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for cmd, p in sub.choices.items():
        out[f"tlgeo {cmd} description"] = p.description or ""
        for a in p._actions:
            out[f"tlgeo {cmd} {'/'.join(a.option_strings) or a.dest}"] = a.help or ""
    return out


def test_no_machine_specific_timing_in_help_or_cost():
    """Help and cost strings say what a setting's cost grows with; measured times live in committed tables
    (docs/benchmarks.md) and ``tlgeo plan`` estimates them on the user's device."""
    texts = _shown_texts()
    assert any(k.endswith(" cost") and v for k, v in texts.items())  # the walk reaches the costs
    bad = {k: v for k, v in texts.items() if MACHINE_TIMING.search(v)}
    assert not bad, "machine-specific timings in help: " + "; ".join(f"{k}: {v!r}" for k, v in sorted(bad.items()))


@pytest.mark.parametrize(
    "text",
    [
        "~0.006 s per token",
        "~12 s per value",
        "2.5 sec",
        "9.0 min",
        "on a 2-core CPU",
        "as measured on this machine",
        "measured 2026-12-02",
        "this CPU",
    ],
)
def test_the_timing_check_catches_a_planted_timing(text):
    assert MACHINE_TIMING.search(f"tokens profiled; {text}")


@pytest.mark.parametrize(
    "text",
    [
        "one forward per value and site",
        "n_heads + 1 resumed forwards per block",
        "in tlgeo atlas 0 skips the step",
        "tokens (0 = all)",
        "kNN is quadratic in the pool",
        "first n items (below 50: indication only)",
        "4x256-token forwards",
    ],
)
def test_the_timing_check_passes_plain_cost_words(text):
    assert not MACHINE_TIMING.search(text)


def test_load_config_is_one_set_of_flags_for_every_command_that_loads_a_model():
    from tlgeo.cli import build_parser
    from tlgeo.runner.cliargs import LoadConfig

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    load_flags = {"--model", "--device", "--dtype", "--device-map", "--max-memory", "--offload-folder", "--threads"}
    loading = [n for n, p in sub.items() if "--device-map" in p._option_string_actions]
    assert {
        "decompose",
        "dirmag",
        "tokenwise",
        "pdsf",
        "patching",
        "compression",
        "geometries",
        "atlas",
        "heads",
    } <= set(loading)
    for name in loading:
        assert load_flags <= set(sub[name]._option_string_actions), name
        for flag in load_flags:  # the same flag: dest, default, type, help
            mine, theirs = sub[name]._option_string_actions[flag], sub["decompose"]._option_string_actions[flag]
            assert (mine.dest, mine.default, mine.type, mine.help) == (
                theirs.dest,
                theirs.default,
                theirs.type,
                theirs.help,
            ), (name, flag)
    p = argparse.ArgumentParser()
    LoadConfig.add_args(p)
    args = p.parse_args(
        [
            "--model",
            "tiny:llama",
            "--dtype",
            "bfloat16",
            "--threads",
            "1",
            "--device-map",
            '{"": "cpu"}',
            "--max-memory",
            "0=1GiB,cpu=2GiB",
        ]
    )
    load = LoadConfig.of(args)
    assert load == LoadConfig(
        model="tiny:llama", dtype="bfloat16", threads=1, device_map='{"": "cpu"}', max_memory={0: "1GiB", "cpu": "2GiB"}
    )
    assert load.load_kwargs() == {
        "device": "auto",
        "dtype": "bfloat16",
        "device_map": {"": "cpu"},
        "max_memory": {0: "1GiB", "cpu": "2GiB"},
        "offload_folder": None,
    }
    compress = sub["compress"]  # llmcompressor places the model itself: --model and --threads only
    assert "--model" in compress._option_string_actions and "--threads" in compress._option_string_actions
    assert "--dtype" not in compress._option_string_actions
    with pytest.raises(ValueError, match="--device-map: not a JSON object"):
        LoadConfig(device_map="{oops").load_kwargs()
