"""One pipeline: an atlas step of a registered analysis writes the tables its command writes with the
same settings, and its section names that command."""

from __future__ import annotations

import pandas as pd
import pytest

from tlgeo.cli import main
from tlgeo.cliargs import config_argv
from tlgeo.report.atlas import step_config
from tlgeo.report.registry import load_steps

from ..test_contract import _comparable
from .conftest import tiny_cfg

ANALYSIS_STEPS = [name for name, step in load_steps().items() if step.analysis is not None]


def test_every_analysis_with_a_command_has_its_atlas_step():
    assert {"profile", "dirmag", "tokenwise", "pdsf", "patching", "geometries"} <= set(ANALYSIS_STEPS)


@pytest.mark.parametrize("name", ANALYSIS_STEPS)
def test_atlas_tables_equal_the_command_tables(name, atlas_dir, tmp_path, capsys):
    step = load_steps()[name]
    cfg = tiny_cfg(atlas_dir)
    conf = step_config(step, cfg, cfg.family_budgets())
    argv = [step.analysis.command_name, "--model", cfg.model, *config_argv(conf), "--out", str(tmp_path)]
    assert main(argv) == 0, capsys.readouterr().err
    html = (atlas_dir / "report.html").read_text()
    assert " ".join(argv[:-2]) in html  # the section names the command that gives its tables
    compared = []
    for t in step.analysis.result.TABLES:
        atlas, command = atlas_dir / t.filename, tmp_path / t.filename
        assert atlas.exists() == command.exists(), (t.filename, atlas.exists(), command.exists())
        if not atlas.exists():
            continue
        a, c = pd.read_csv(atlas), pd.read_csv(command)
        clock = [col for col in a.columns if "seconds" in col or col == "wall_s"]  # wall times are not results
        pd.testing.assert_frame_equal(_comparable(a.drop(columns=clock), t), _comparable(c.drop(columns=clock), t),
                                      check_exact=False, rtol=1e-6, atol=1e-9, obj=f"{name}: {t.filename}")
        compared.append(t.filename)
    assert compared, f"{name}: no table written"


def test_config_argv_gives_the_config_back():
    from tlgeo.cli import build_parser
    from tlgeo.cliargs import config_from_args
    from tlgeo.dirmag.config import DirmagConfig

    cfg = DirmagConfig(sentences=7, absolute_deltas=(), norm_fractions=(0.5,), relative=True, layers=(1, 3),
                       mode="faithful")
    argv = config_argv(cfg)
    assert "--relative" in argv and argv[argv.index("--layers") + 1] == "1,3"
    args = build_parser().parse_args(["dirmag", "--model", "tiny:llama", *argv])
    assert config_from_args(DirmagConfig, args) == cfg
    assert config_argv(DirmagConfig()) == []
