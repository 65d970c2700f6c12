"""Where a folder's numbers came from: one JSON line per finished command in ``provenance.jsonl``.

Each line holds the command as typed (``argv``), every setting it ran with (the parsed flags,
defaults included), the identities of the models it ran (:data:`tlgeo.runner.results.IDENTITY`), the
git commit of the tlgeo it ran (and whether the tree had uncommitted changes), the versions of
tlgeo, torch, transformers and TransformerLens, the machine and the date. ``scripts/reproduce.py``
reruns a folder's commands from these lines and compares the tables.

This module imports no torch: it reads versions from the installed packages' metadata.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import InputError
from ..storage import append_lines, read_lines

__all__ = [
    "FILENAME",
    "PACKAGES",
    "provenance",
    "record",
    "close_run",
    "record_table",
    "read",
    "git_state",
    "code_state",
]

FILENAME = "provenance.jsonl"
PACKAGES = ("tlgeo", "torch", "transformers", "transformer-lens", "accelerate", "numpy", "pandas")


def git_state(repo: str | os.PathLike | None = None) -> dict[str, Any]:
    """``{"commit": sha or None, "dirty": bool or None}`` of the git tree tlgeo runs from (``None``
    outside a git checkout, e.g. an installed wheel). ``dirty``: a tracked file outside ``results/`` differs from
    the commit (the code or data that makes the numbers; a run that rewrites a committed results folder does
    not make its own tree dirty)."""
    repo = Path(repo) if repo is not None else Path(__file__).resolve().parents[1]

    def git(*a: str) -> str | None:
        try:
            r = subprocess.run(["git", "-C", str(repo), *a], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return r.stdout.strip() if r.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


_CODE: dict[str, Any] = {}


def code_state() -> dict[str, Any]:
    """:func:`git_state` of tlgeo's own checkout as it was when this process first asked (a command asks when it
    starts, a run from Python when it is called): the code a run has loaded, which is what its numbers come
    from, not the tree at the moment its provenance is written (a long run outlives edits and commits)."""
    if not _CODE:
        _CODE.update(git_state())
    return dict(_CODE)


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    if out.get("tlgeo") is None:  # run from a checkout that is not installed
        from ..version import __version__

        out["tlgeo"] = __version__
    return out


def _cpu_model() -> str | None:
    """The CPU's model name as the OS reports it (``/proc/cpuinfo`` on Linux), else what :mod:`platform` says."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), None)
    except OSError:
        return platform.processor() or None


def _machine() -> dict[str, Any]:
    """The machine, with what decides the order of float sums on a CPU: its model, torch's kernels for it, threads."""
    m: dict[str, Any] = {
        "platform": platform.platform(),
        "cpu": platform.machine(),
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count(),
    }
    torch = sys.modules.get("torch")  # only if the command loaded it: this module imports no torch
    if torch is not None:
        m["torch_threads"] = torch.get_num_threads()  # as --threads or OMP_NUM_THREADS set them: sums' order
        m["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()  # the vector kernels (AVX2, AVX512...)
        if torch.cuda.is_available():
            m["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return m


def _jsonable(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [_jsonable(x) for x in v]
    return str(v)


def provenance(
    argv: Iterable[str],
    settings: Mapping[str, Any] | None = None,
    identities: Iterable[Mapping[str, Any]] = (),
    resumed: Iterable[str] = (),
) -> dict[str, Any]:
    """The provenance line of a run of ``tlgeo <argv>`` with ``settings`` (its parsed flags and what they
    resolved to); ``resumed``: what the run took back from earlier runs' logs instead of computing it, and
    what it computed again (:meth:`tlgeo.runner.results.RunState.lines`), so that a resumed folder says which of its
    rows this invocation made."""
    argv = [str(a) for a in argv]
    return {
        "command": "tlgeo " + shlex.join(argv),
        "argv": argv,
        "settings": _jsonable({k: v for k, v in (settings or {}).items() if not k.startswith("_")}),
        "identities": [dict(i) for i in identities],
        "git": code_state(),
        "versions": _versions(),
        "machine": _machine(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "resumed": list(resumed),
    }


def record(
    out: str | os.PathLike,
    argv: Iterable[str] | None,
    settings: Mapping[str, Any] | None = None,
    identities: Iterable[Mapping[str, Any]] = (),
    resumed: Iterable[str] = (),
    *,
    python: str | None = None,
) -> Path:
    """Append the provenance of a finished run to ``out/provenance.jsonl``; returns its path. ``python``: a run made
    from Python (``run(model, cfg, out=...)``), named by its config class; ``argv`` is then the command line that
    makes the same tables (``scripts/reproduce.py`` reruns it), or ``None`` where none can (``command`` says so)."""
    line = provenance(argv or [], settings, identities, resumed)
    if python is not None:
        line["made_from"] = "python"
        if argv is None:
            line["command"] = f"python: {python}(...) (no command line says this run)"
            line["argv"] = None
    path = Path(out) / FILENAME
    append_lines(path, [json.dumps(line, sort_keys=True)])
    return path


def close_run(
    state: Any,
    out: str | os.PathLike | None,
    argv: list[str] | None,
    settings: Mapping[str, Any] | None,
    identities: Iterable[Mapping[str, Any]] | None = None,
    *,
    python: str | None = None,
) -> Path | None:
    """How every run ends, a ``tlgeo`` command's and a run's from Python (the one place either records its
    provenance): the rows its logs gave back are said (``state``: its :class:`~tlgeo.runner.results.RunState`), then,
    with ``out``, its line of ``out/provenance.jsonl`` (:func:`record`; ``identities`` default the state's), said too.
    Returns the provenance file (``None`` without ``out``)."""
    resumed = state.lines()
    for line in resumed:  # what this run took back from its logs instead of computing
        print(line)
    if out is None:
        return None
    path = record(out, argv, settings, state.seen if identities is None else identities, resumed, python=python)
    print(f"provenance: {path}")
    return path


def record_table(
    out: str | os.PathLike,
    name: str,
    rows: list[Mapping[str, Any]],
    argv: Iterable[str],
    settings: Mapping[str, Any] | None = None,
) -> Path:
    """A script's measurements (a benchmark's timings): ``rows`` appended to ``out/<name>.csv``, each row led by the
    ``commit`` and ``dirty`` of the code that measured it and the ``date``, and the invocation's provenance line
    appended to ``out/provenance.jsonl`` (``argv``: the script and its flags). Earlier invocations' rows stay, so
    that a number quoted from the table names the commit that made it. Returns the table's path. No rows (a
    benchmark whose every case failed) is refused before anything is written: the table keeps what it had."""
    import pandas as pd

    from ..storage import write_csv

    if not rows:
        raise InputError(f"no rows to add to {Path(out) / f'{name}.csv'}: nothing measured, nothing written")
    line = provenance(argv, settings)
    line.update(command="python " + shlex.join(line["argv"]), made_from="script")
    stamp = {"commit": line["git"].get("commit"), "dirty": line["git"].get("dirty"), "date": line["date"]}
    path = Path(out) / f"{name}.csv"
    table = pd.DataFrame([{**stamp, **r} for r in rows])
    if path.exists():
        table = pd.concat([pd.read_csv(path), table], ignore_index=True)
    write_csv(path, table)
    append_lines(Path(out) / FILENAME, [json.dumps(line, sort_keys=True)])
    return path


def read(folder: str | os.PathLike) -> list[dict[str, Any]]:
    """Every provenance line of ``folder`` (oldest first); ``[]`` if it has none. A line torn by a kill
    (or otherwise unreadable) is left out."""
    out = []
    for line in read_lines(Path(folder) / FILENAME)[0]:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
