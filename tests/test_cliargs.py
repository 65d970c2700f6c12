"""Shared command-line pieces: flags generated from a config, the interrupt record."""

import argparse
import os
import time
from dataclasses import dataclass

import pytest

from tlgeo.analysis import Config, param
from tlgeo.cliargs import Formatter, RunRecord, add_config_args, config_from_args, default_out


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
    cfg = config_from_args(Toy, p.parse_args(["--tokens", "0", "--kinds", "c", "--layers", "1,3-4", "--mode", "y",
                                              "--faithful"]))
    assert cfg == Toy(tokens=0, kinds=("c",), layers=(1, 3, 4), mode="y", faithful=True)
    assert "--hidden" not in p.format_help()
    text = " ".join(p.format_help().split())
    assert "kinds (default: a,b)" in text and "('a', 'b')" not in text  # lists as typed, not as tuples


@pytest.mark.parametrize("argv, msg", [
    (["--seeds", "0"], "argument --seeds: must be a positive integer, got '0'"),
    (["--tokens", "-1"], "argument --tokens: must be a non-negative integer"),
    (["--mode", "z"], "argument --mode: invalid choice: 'z'"),
    (["--layers", "x"], "argument --layers: expected indices"),
])
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
