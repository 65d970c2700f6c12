"""One pipeline: an atlas step of a registered analysis writes the tables its command writes with the
same settings, and its section names that command."""

from __future__ import annotations

import html
import shlex

import pandas as pd
import torch

from tlgeo.cli import main
from tlgeo.runner.cliargs import config_argv
from tlgeo.report.atlas import step_config
from tlgeo.report.registry import load_steps

from ..test_contract import _comparable
from .conftest import tiny_cfg

STEPS = load_steps()


def test_every_step_is_a_registered_analysis_with_a_command():
    from tlgeo.report.registry import load_commands

    commands = load_commands()
    assert all(step.analysis.command_name in commands for step in STEPS.values())
    assert {
        "profile",
        "sweeps",
        "compare",
        "heads",
        "mlp_carrier",
        "closed_form",
        "audit",
        "dirmag",
        "tokenwise",
        "pdsf",
        "patching",
        "circuits",
        "geometries",
    } == set(STEPS)


def test_atlas_tables_equal_the_commands_tables(atlas_dir, tmp_path, capsys):
    """Each step's command (the line its section names), run in report order into one folder, writes the
    atlas's tables (the comparison reads the sweep's perplexities there, as in the atlas)."""
    cfg, report = tiny_cfg(atlas_dir), html.unescape((atlas_dir / "report.html").read_text())
    budgets = cfg.chapter_budgets()
    differ, compared = {}, []
    for name, step in STEPS.items():
        conf = step_config(step, cfg, budgets)
        argv = [step.analysis.command_name, "--model", cfg.model, *config_argv(conf)]
        assert shlex.join(argv) in report, name  # the section names the command that gives its tables
        threads = ["--threads", str(torch.get_num_threads())]  # the atlas's: a command takes every core by default
        assert main([*argv, "--out", str(tmp_path), *threads]) == 0, capsys.readouterr().err
        for t in step.analysis.result.TABLES:
            atlas, command = atlas_dir / t.filename, tmp_path / t.filename
            assert atlas.exists() == command.exists(), (name, t.filename, atlas.exists(), command.exists())
            if not atlas.exists():
                continue
            a, c = pd.read_csv(atlas), pd.read_csv(command)
            clock = [col for col in a.columns if "seconds" in col or col == "wall_s"]  # wall times: not results
            try:
                pd.testing.assert_frame_equal(
                    _comparable(a.drop(columns=clock), t),
                    _comparable(c.drop(columns=clock), t),
                    check_exact=False,
                    rtol=1e-6,
                    atol=1e-9,
                    obj=f"{name}: {t.filename}",
                )
            except AssertionError as e:
                differ[t.filename] = str(e).splitlines()[:6]
            compared.append(t.filename)
    assert not differ, differ
    assert len(compared) >= len(STEPS)


def test_config_argv_gives_the_config_back():
    from tlgeo.cli import build_parser
    from tlgeo.runner.cliargs import config_from_args
    from tlgeo.dirmag.config import DirmagConfig

    cfg = DirmagConfig(
        sentences=7, absolute_deltas=(), norm_fractions=(0.5,), relative=True, layers=(1, 3), mode="faithful"
    )
    argv = config_argv(cfg)
    assert "--relative" in argv and argv[argv.index("--layers") + 1] == "1,3"
    args = build_parser().parse_args(["dirmag", "--model", "tiny:llama", *argv])
    assert config_from_args(DirmagConfig, args) == cfg
    assert config_argv(DirmagConfig()) == []
