"""Random and out-of-range values for every flag of every command. Each try is ``tlgeo <command> --model
tiny:llama <flag> <value>`` with the work stopped where it would start (the model load, training, compression):
it must end in a one-line error before that point, or get there (a valid configuration); a traceback, or an
error of several lines, is a failure."""

from __future__ import annotations

import argparse
import contextlib
import io
import random
from pathlib import Path

import pandas as pd

# values any flag may be given: empty, signs, extremes, non-numbers, lists and ranges gone wrong
WILD = [
    "",
    " ",
    "0",
    "-1",
    "1",
    "2",
    "7",
    "0.5",
    "-0.5",
    "1.5",
    "1e309",
    "-1e309",
    "nan",
    "inf",
    "-inf",
    "999999999999999999999",
    "-999999999999999999999",
    "abc",
    "ünïcødé",
    "1,2",
    "1,,2",
    ",",
    "3,a",
    "1-",
    "-3",
    "5-400",
    "400-5",
    "all",
    "none",
    "None",
    "true",
    "[1]",
    "{}",
    '{"a": 1}',
    "x" * 300,
    "\t",
    "0,0,0",
]
SKIP = {"sites", "models"}  # nothing to configure
BASE = {"ppl": ["--site", "attn"], "plan": ["decompose"]}  # what a command needs before anything else
FIXED = {
    "--model",
    "--out",
    "--help",
    "--version",
    "--device",
    "--device-map",
    "--offload-folder",
    "--max-memory",
    "--report",
    "--tensorboard",
    "--wandb",
}  # placement flags have their own tests; outputs go to --out


class Reached(Exception):
    """The command got past its checks to where its work starts."""


def commands() -> dict[str, argparse.ArgumentParser]:
    from tlgeo.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: p for name, p in sub.choices.items() if name not in SKIP and name == p.prog.split()[-1]}


def flags(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a
        for a in parser._actions
        if a.option_strings
        and a.nargs != 0
        and not set(a.option_strings) & FIXED
        and not isinstance(a, argparse._HelpAction)
    ]


def values(action: argparse.Action, rng: random.Random, n: int) -> list[str]:
    """``n`` values for ``action``: wild ones, its choices and choices misspelt, numbers around its default."""
    pool = list(WILD)
    if action.choices:
        pool += [str(c) for c in action.choices] + [str(c) + "x" for c in action.choices]
    d = action.default
    if isinstance(d, (int, float)) and not isinstance(d, bool):
        pool += [str(d), str(-d), str(d * 1000), str(d / 1000), str(d + 1)]
    return [rng.choice(pool) for _ in range(n)]


@contextlib.contextmanager
def work_stopped():
    """Inside: loading a model, training and compressing raise :class:`Reached` instead of running."""
    import tlgeo.compression.compress as compress
    import tlgeo.models.loading as loading
    import tlgeo.train.loop as loop

    def reached(*a, **k):
        raise Reached

    saved = [
        (loading, "_load_model", loading._load_model),
        (loop, "train", loop.train),
        (compress, "run_compress", compress.run_compress),
    ]
    for mod, name, _ in saved:
        setattr(mod, name, reached)
    try:
        yield
    finally:
        for mod, name, real in saved:
            setattr(mod, name, real)


def one_try(command: str, flag: str, value: str, out: Path) -> tuple[str, str]:
    """``("error", line)``, ``("valid", "")`` or ``("other", what happened)``."""
    from tlgeo.cli import main

    # compress works on a model folder: the embedded one (a tiny model is made in Python); train makes its own
    model = [] if command == "train" else ["--model", "smollm2-135m" if command == "compress" else "tiny:llama"]
    argv = [command, *BASE.get(command, []), *model, flag, value, "--out", str(out)]
    import torch

    err, threads = io.StringIO(), torch.get_num_threads()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main(argv)
    except Reached:
        return "valid", ""
    except SystemExit as e:
        rc = e.code
    except BaseException as e:  # noqa: BLE001 - a traceback is what this looks for
        return "other", f"{' '.join(argv)}: {type(e).__name__}: {e}"
    finally:
        torch.set_num_threads(threads)  # a valid --threads took effect in this process: the tests after keep theirs
    lines = [line for line in err.getvalue().split("\n") if line.strip()]  # terminal lines ("\x1e" is none)
    if rc == 0:
        return "valid", ""
    if rc == 2 and len(lines) == 1 and ": error: " in lines[0]:
        return "error", lines[0]
    return "other", f"{' '.join(argv)}: exit {rc}: {err.getvalue()[-600:]}"


def flag_survey(per_command: int, seed: int = 0, only: set[str] | None = None) -> pd.DataFrame:
    """For each command, ``per_command`` tries of a random flag and value: the counts of each outcome (and the
    first few failures, in ``failures``)."""
    import tempfile

    rng = random.Random(seed)
    rows = []
    with tempfile.TemporaryDirectory(prefix="tlgeo-fuzz-") as tmp, work_stopped():
        for name, parser in commands().items():
            if only and name not in only:
                continue
            acts = flags(parser)
            counts, failures = {"error": 0, "valid": 0, "other": 0}, []
            for _ in range(per_command):
                act = rng.choice(acts)
                kind, what = one_try(name, act.option_strings[-1], values(act, rng, 1)[0], Path(tmp) / "o")
                counts[kind] += 1
                if kind == "other":
                    failures.append(what)
            rows.append(
                {
                    "command": name,
                    "flags": len(acts),
                    "tried": per_command,
                    "one_line_error": counts["error"],
                    "valid": counts["valid"],
                    "other": counts["other"],
                    "failures": " | ".join(failures[:3]),
                }
            )
    return pd.DataFrame(rows)
