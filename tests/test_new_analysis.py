"""A new analysis is one folder and one registration: a toy package outside tlgeo, named in
``$TLGEO_ANALYSES``, is in the command line, the atlas, the support matrix, the docs' list of analyses
and the contract tests, with nothing else edited (ARCHITECTURE.md, "Adding an analysis")."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TOY = '''
"""A toy analysis: the mean norm of the residual stream after each block, one layer per work unit."""
from dataclasses import dataclass

import pandas as pd

from tlgeo.runner.analysis import Analysis, Config, Result, Table, param, register_analysis
from tlgeo.families import Support
from tlgeo.runner.identity import identified, run_identity


@dataclass(frozen=True)
class ToyConfig(Config):
    tokens: int = param(16, "tokens of the text read")
    text: str = param("The cat sat on the mat because the mat was warm and the cat was cold.", "the text")


@dataclass
class ToyResult(Result):
    TABLES = (Table("norms", ("tokens", "layer"), "toy_norms.csv"),)


def units(model, cfg):
    return [(layer,) for layer in range(model.cfg.n_layers)]


@identified
def run(model, cfg, *, out=None, log=None, units=None, progress=False, on_table=None):
    layers = [u[0] for u in units] if units is not None else range(model.cfg.n_layers)
    _, cache = model.run_with_cache(model.to_tokens(cfg.text)[:, : cfg.tokens])
    rows = [dict(tokens=cfg.tokens, layer=layer,
                 norm=float(cache[f"blocks.{layer}.hook_resid_post"].float().norm(dim=-1).mean())) for layer in layers]
    return ToyResult(norms=pd.DataFrame(rows)).deliver(out, on_table, identity=run_identity(model).row())


def render(ctx, result):
    ctx.report.table(result.norms, caption="toy: mean residual norm after each block")


register_analysis(Analysis(
    "toy", ToyConfig, run, ToyResult, units, "the residual stream's mean norm after each block",
    tiny=dict(tokens=8), render=render, docs="analyses/toy",
    support=lambda family: Support("yes") if family.attention else Support("no", "toy: reads attention blocks")))
'''

CHECKS = """
import contextlib, io, json, sys
from pathlib import Path

import pandas as pd

from tlgeo.cli import main
from tlgeo.report.registry import analyses_markdown, load_analyses



def help_of(command):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):
        main([command, "--help"])
    return buf.getvalue()


out = Path(sys.argv[1])
got = {"help": help_of("toy"), "atlas_help": help_of("atlas")}
with contextlib.redirect_stdout(io.StringIO()):
    got["rc"] = main(["toy", "--model", "tiny:llama", "--out", str(out / "cmd"), "--tokens", "8"])
    got["atlas_rc"] = main(["atlas", "--model", "tiny:llama", "--out", str(out / "atlas"), "--steps", "toy",
                            "--toy-tokens", "8"])
err = io.StringIO()
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
    got["refused_rc"] = main(["toy", "--model", "tiny:mamba", "--out", str(out / "refused")])
got["refused"] = err.getvalue()
from tlgeo.families import support_table

table = support_table()
got["support"] = table["toy"].to_dict() if "toy" in table.columns else None
got["docs"] = analyses_markdown()
got["analyses"] = list(load_analyses())
from tlgeo.report.registry import load_steps

got["n_steps"] = len(load_steps())
print(json.dumps(got))
"""


def test_a_toy_analysis_in_one_folder_is_everywhere(tmp_path):
    pkg = tmp_path / "plugins" / "tlgeo_toy"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "analysis.py").write_text(textwrap.dedent(TOY))  # the one registration
    env = {
        **os.environ,
        "TLGEO_ANALYSES": "tlgeo_toy",
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "plugins"), str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.run(
        [sys.executable, "-c", CHECKS, str(tmp_path)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    import json

    import pandas as pd

    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["analyses"][-1] == "toy"  # after tlgeo's own
    assert "--tokens" in got["help"] and "(default: 16)" in got["help"] and "--model" in got["help"]  # the CLI
    assert got["rc"] == 0
    cmd = pd.read_csv(tmp_path / "cmd" / "toy_norms.csv")
    assert list(cmd["layer"]) == [0, 1, 2] and (cmd["norm"] > 0).all()
    assert (tmp_path / "cmd" / "provenance.jsonl").is_file()
    assert "--toy-tokens" in got["atlas_help"] and got["atlas_rc"] == 0  # the atlas: its budgets and its step
    report = (tmp_path / "atlas" / "report.html").read_text()
    assert (
        "the residual stream&#x27;s mean norm after each block" in report
        or "the residual stream's mean norm after each block" in report
    )
    assert "toy: mean residual norm after each block" in report
    assert f"<h2>{got['n_steps']}. the residual stream" in report  # the last step's number, in a partial run too
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "atlas" / "toy_norms.csv"), cmd)  # the atlas = the command
    assert got["support"]["llama"] == "yes" and got["support"]["mamba"] == "no"  # the support matrix
    assert got["refused_rc"] != 0 and "toy: reads attention blocks" in got["refused"]  # refused before any work
    assert not (tmp_path / "refused" / "toy_norms.csv").exists()
    assert "| [toy](../analyses/toy.md) | `tlgeo toy` |" in got["docs"] and "/analyses/toy" in got["docs"]
    # the contract tests: the toy's config, save/load, units split and merged, a rerun of another identity
    contract = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            str(ROOT / "tests" / "test_contract.py"),
            "-k",
            "toy",
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert contract.returncode == 0, contract.stdout[-3000:]
    assert " passed" in contract.stdout and int(contract.stdout.split(" passed")[0].split()[-1]) >= 5, contract.stdout
