"""Rerun the commands that made a results folder, from its provenance, and compare the tables.

    python scripts/reproduce.py results/geometries-smollm2-135m            # every command, into a temp folder
    python scripts/reproduce.py results/X --out runs/X-again --line -1     # the last command only
    python scripts/reproduce.py results/X --dry-run                        # print the commands
    python scripts/reproduce.py --all --replace                            # every folder RESULTS.md quotes, made again
    python scripts/reproduce.py --all --replace --resume                   # ... except those this code made already
    python scripts/reproduce.py --all --replace --resume --jobs 2          # two folders at a time, one thread each

``--all``: every folder that a ``<!-- source: results/<folder>/... -->`` comment of ``--doc`` (RESULTS.md) names, each
rerun from its provenance at this commit; it refuses a tree with uncommitted changes outside ``results/`` (a
number must name the commit that made it). With ``--replace`` each rerun folder takes the place of the old one
(its provenance then holds this commit's lines only); without, they are compared as for one folder. With
``--resume`` a folder whose every provenance line was made, from a clean tree, by this code (its commit and this one
hold the same files outside ``results/``, ``docs/``, ``tests/``, ``notebooks/`` and the ``.md`` files: only results
and prose about them were committed between them) is not rerun: an interrupted ``--all --replace`` goes on where it
stopped, in a later session too, with RESULTS.md rewritten from the folders already made. ``--dry-run`` says of
each folder whether this code made it. ``--jobs N`` reruns N folders at a time, each command with one torch thread
(``OMP_NUM_THREADS=1``: two jobs whose threads outnumber the cores run ~10x slower), a folder only after the folders
its commands read (e.g. a model trained into another quoted folder); each folder's output is printed when it ends.

Each line of ``FOLDER/provenance.jsonl`` (:mod:`tlgeo.runner.provenance`) is one finished ``tlgeo`` command (or a
run from Python, ``run(model, cfg, out=...)``, which records the command line that makes the same tables, or a
script's table, ``record_table``, rerun as ``python <script> <flags>``); it is rerun with ``--out`` pointed at the
new folder, with this checkout's tlgeo (the commit it was made with is printed beside it). Then every CSV the folder
and the rerun both hold is compared, row by row: the rows of the rerun's model identities, matched on the columns
that are not floats; float columns within ``--rtol`` / ``--atol``; times, memory, the tlgeo version and the commit a
script's rows name are not compared. Exit status 0 when every table agrees, 1 when one differs, 2 on bad input, 3
when a command failed (with ``--all --replace`` that folder is left as it was, and no other folder starts).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tlgeo.runner.provenance import code_state, git_state, read  # noqa: E402

SOURCE = re.compile(r"<!--\s*source:\s*(\S+)\s*-->")

COMMAND_FAILED = 3  # never 1 (a table differs): a folder whose rerun failed is not replaced by it
# what differs between two runs of the same work: timings, memory, dates, the commit a script's row names, and the
# id of a model a run made (a compressed model's manifest records its compression time)
VOLATILE = re.compile(
    r"(^|_)(seconds|secs?|time|wall|elapsed|rss|memory|mem|gib|mib|date|started|tlgeo_version|model_cfg|commit|dirty)"
    r"($|_)"
)


def with_out(argv: list[str], out: Path) -> list[str]:
    """``argv`` with its ``--out`` (given or not) replaced by ``out``."""
    argv = list(argv)
    for i, a in enumerate(argv):
        if a == "--out" and i + 1 < len(argv):
            return [*argv[:i], "--out", str(out), *argv[i + 2 :]]
        if a.startswith("--out="):
            return [*argv[:i], f"--out={out}", *argv[i + 1 :]]
    return [*argv, "--out", str(out)]


def with_files_of(argv: list[str], folder: Path) -> list[str]:
    """``argv`` with each file it names beside the tables of the run (a task of your own, ``--tasks
    ioi,OUT/patching_task_x.json``) found in ``folder`` where the path recorded no longer leads to it (the folder
    moved, or was cloned elsewhere)."""

    def fix(item: str) -> str:
        if item.endswith(".json") and not Path(item).exists() and (Path(folder) / Path(item).name).exists():
            return str(Path(folder) / Path(item).name)
        return item

    return [",".join(fix(x) for x in a.split(",")) if ".json" in a else a for a in argv]


def compare_tables(old: pd.DataFrame, new: pd.DataFrame, *, rtol: float, atol: float) -> str | None:
    """``None`` when every row of ``new`` is in ``old`` with the same numbers; else what differs.

    Rows are matched on the columns that are not floats (the model's identity, the settings, the
    keys); ``old``'s other rows (other settings, other models) are left alone."""
    if set(new.columns) - set(old.columns):
        return f"columns only in the rerun: {sorted(set(new.columns) - set(old.columns))}"
    cols = [c for c in new.columns if not VOLATILE.search(c)]
    floats = [c for c in cols if pd.api.types.is_float_dtype(new[c]) or pd.api.types.is_float_dtype(old[c])]
    keys = [c for c in cols if c not in floats]
    a, b = old[cols].copy(), new[cols].copy()
    for df in (a, b):
        for c in keys:
            df[c] = df[c].astype(str)
    if keys and (a.duplicated(keys).any() or b.duplicated(keys).any()):
        keys = []  # rows told apart by no column: compared in order
    if not keys:
        if len(a) != len(b):
            return f"{len(b)} rows in the rerun, {len(a)} in the folder"
        both = a.add_suffix("_old").join(b.add_suffix("_new"))
    else:
        both = b.merge(a, on=keys, how="left", suffixes=("_new", "_old"), indicator=True)
        missing = int((both["_merge"] == "left_only").sum())
        if missing:
            return f"{missing} of {len(b)} rerun rows are not in the folder (e.g. {b[keys].iloc[0].to_dict()})"
    for c in floats:
        x, y = both[f"{c}_old"].to_numpy(float), both[f"{c}_new"].to_numpy(float)
        bad = ~np.isclose(x, y, rtol=rtol, atol=atol, equal_nan=True)
        if bad.any():
            i = int(np.argmax(bad))
            return f"column {c!r}: {int(bad.sum())} of {len(x)} values differ (e.g. {x[i]!r} -> {y[i]!r})"
    return None


def rerun(argv: list[str], script: bool = False) -> int:
    """Run ``tlgeo <argv>`` (a script's line: ``python <argv>``, the script first) in a fresh process of this
    Python; its exit status."""
    return subprocess.run([sys.executable, *([] if script else ["-m", "tlgeo"]), *argv], cwd=ROOT).returncode


def _csvs(folder: Path) -> dict[str, Path]:
    return {
        str(p.relative_to(folder)): p
        for p in sorted(folder.rglob("*.csv*"))
        if p.suffix in (".csv", ".gz") and ".csv" in p.name
    }


def quoted_folders(doc: Path) -> list[Path]:
    """The folders whose tables ``doc`` quotes (its ``source`` comments), relative to the doc's folder, in order."""
    paths = [Path(m) for m in SOURCE.findall(doc.read_text())]
    return list(dict.fromkeys(doc.parent / p.parent for p in paths))


# what makes no number: the results, the prose about them, the tests and the notebooks that read them
NOT_CODE = ("results", "docs", "tests", "notebooks", "*.md")


def code_commit(commit: str | None, repo: Path | None = None) -> str | None:
    """The last commit at or before ``commit`` that changed a file that can make a number (any outside
    :data:`NOT_CODE`; ``None`` where git cannot say, e.g. a commit this clone lacks): two commits with the same
    one hold the same code and data."""
    if not commit:
        return None
    r = subprocess.run(
        [
            "git",
            "-C",
            str(repo or ROOT),
            "log",
            "-1",
            "--format=%H",
            commit,
            "--",
            ".",
            *(f":(exclude){p}" for p in NOT_CODE),
        ],
        capture_output=True,
        text=True,
    )
    return (r.stdout.strip() or None) if r.returncode == 0 else None


def made_by(folder: Path, code: str | None, repo: Path | None = None) -> bool:
    """Whether every provenance line of ``folder`` was made from a clean tree of the code commit ``code``."""
    lines = read(folder)
    return (
        bool(lines)
        and code is not None
        and all(
            (p.get("git") or {}).get("dirty") is False and code_commit((p.get("git") or {}).get("commit"), repo) == code
            for p in lines
        )
    )


def depends_on(folder: Path, folders: list[Path]) -> set[Path]:
    """The folders of ``folders`` that a command of ``folder``'s provenance reads (names in its argv)."""
    words = [str(w) for p in read(folder) for w in (p.get("argv") or [])]
    return {
        f
        for f in folders
        if f != folder
        and any(w == (r := _rel(f)) or w.startswith(r + "/") or w == str(f) or w.startswith(f"{f}/") for w in words)
    }


def _rel(folder: Path) -> str:
    try:
        return str(folder.resolve().relative_to(ROOT.resolve()))
    except ValueError:
        return str(folder)


def _remake(folder: Path, *, replace: bool, rtol: float, atol: float, commit: str | None) -> int:
    """One folder rerun into a new folder beside it (and, with ``replace``, put in its place): :func:`main`'s
    status (0 same, 1 differs, 2 a command failed: the old folder stays)."""
    out = Path(tempfile.mkdtemp(prefix=f"reproduce-{folder.name}-", dir=folder.parent))
    got = main([str(folder), "--out", str(out), "--rtol", str(rtol), "--atol", str(atol)])
    if got not in (0, 1):
        return got
    if replace:
        old = folder.with_name(folder.name + ".old")
        folder.rename(old)
        out.rename(folder)
        shutil.rmtree(old)
        print(f"replaced {folder} with its rerun at {str(commit)[:12]}")
    return got


def _remake_alone(folder: Path, *, replace: bool, rtol: float, atol: float, commit: str | None) -> tuple[int, str]:
    """:func:`_remake` in a process of its own with one torch thread: ``(status, what it printed)``."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path; import importlib.util as u; "
        "s = u.spec_from_file_location('reproduce', sys.argv[2]); m = u.module_from_spec(s); s.loader.exec_module(m); "
        "sys.exit(m._remake(Path(sys.argv[3]), replace=sys.argv[4] == '1', rtol=float(sys.argv[5]), "
        "atol=float(sys.argv[6]), commit=sys.argv[7]))"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    args = [str(ROOT), __file__, str(folder), "1" if replace else "0", str(rtol), str(atol), str(commit)]
    r = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=env, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def _remake_all(folders: list[Path], jobs: int, **kw) -> int:
    """``folders`` remade ``jobs`` at a time (:func:`_remake_alone`), each after the folders it reads; stops
    starting new ones after a failed command. The status of the worst."""
    waiting = {f: depends_on(f, folders) for f in folders}
    done: set[Path] = set()
    status, running = 0, {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        while waiting or running:
            ready = [f for f, deps in waiting.items() if deps <= done] if status < 2 else []
            for f in ready[: jobs - len(running)]:
                del waiting[f]
                print(f"== {f} (started)", flush=True)
                running[pool.submit(_remake_alone, f, **kw)] = f
            if not running:
                break  # a failed command, or folders waiting on one that failed
            finished, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
            for fut in finished:
                f = running.pop(fut)
                got, said = fut.result()
                print(f"== {f} (status {got})\n{said}", end="" if said.endswith("\n") else "\n", flush=True)
                status = max(status, got)
                if got in (0, 1):
                    done.add(f)
    for f, deps in waiting.items():
        why = f"it reads {', '.join(map(_rel, sorted(deps - done)))}, whose rerun failed" if deps - done else ""
        print(f"not rerun: {f} ({why or 'a command failed before its turn'})", file=sys.stderr)
    return status


def reproduce_all(
    doc: Path, *, replace: bool, dry_run: bool, rtol: float, atol: float, resume: bool = False, jobs: int = 1
) -> int:
    """Every folder ``doc`` quotes, rerun from its provenance at this commit (see the module docstring)."""
    state = code_state()
    if state.get("dirty"):
        print(
            "reproduce: the tree has uncommitted changes outside results/: commit them first, so that every "
            f"rerun folder names the commit that made it ({state.get('commit')})",
            file=sys.stderr,
        )
        return 2
    folders = quoted_folders(doc)
    missing = [f for f in folders if not read(f)]
    if missing:
        print(
            f"reproduce: {', '.join(map(str, missing))}: no provenance.jsonl, nothing says how to make it",
            file=sys.stderr,
        )
        return 2
    status = 0
    code = code_commit(state.get("commit"))
    todo = []
    for folder in folders:
        current = made_by(folder, code)
        print(f"== {folder}" + (f" (made by this code, {str(code)[:12]})" if current else ""), flush=True)
        if current and resume:
            print("not rerun (--resume)")
            continue
        if dry_run:
            status |= main([str(folder), "--dry-run"])
            continue
        todo.append(folder)
    kw = dict(replace=replace, rtol=rtol, atol=atol, commit=state.get("commit"))
    if jobs > 1 and todo:
        return max(status, _remake_all(todo, jobs, **kw))
    for folder in todo:
        got = _remake(folder, **kw)
        if got not in (0, 1):  # a command failed: the old folder stays
            return got
        status |= got
    return status


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--all" in argv:
        ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
        ap.add_argument("--all", action="store_true", required=True)
        ap.add_argument("--doc", type=Path, default=ROOT / "RESULTS.md", help="the document whose folders to rerun")
        ap.add_argument("--replace", action="store_true", help="put each rerun folder in place of the old one")
        ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
        ap.add_argument(
            "--resume",
            action="store_true",
            help="leave out the folders this code made already (an interrupted --all --replace)",
        )
        ap.add_argument("--rtol", type=float, default=1e-4)
        ap.add_argument("--atol", type=float, default=1e-6)
        ap.add_argument("--jobs", type=int, default=1, help="folders rerun at a time, one torch thread each")
        a = ap.parse_args(argv)
        if a.jobs < 1:
            ap.error(f"--jobs must be >= 1, got {a.jobs}")
        return reproduce_all(
            a.doc, replace=a.replace, dry_run=a.dry_run, rtol=a.rtol, atol=a.atol, resume=a.resume, jobs=a.jobs
        )
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="a folder with a provenance.jsonl")
    ap.add_argument("--out", type=Path, default=None, help="where to rerun (default: a temporary folder)")
    ap.add_argument(
        "--line",
        type=int,
        nargs="*",
        default=None,
        help="which provenance lines to rerun (0-based, negative from the end; default: all)",
    )
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--atol", type=float, default=1e-6)
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = ap.parse_args(argv)
    lines = read(args.folder)
    if not lines:
        print(f"reproduce: {args.folder} has no provenance.jsonl: nothing says how it was made", file=sys.stderr)
        return 2
    try:
        chosen = [lines[i] for i in args.line] if args.line else lines
    except IndexError:
        print(f"reproduce: --line out of range: {args.folder} has {len(lines)} provenance line(s)", file=sys.stderr)
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="tlgeo-reproduce-"))
    here = git_state()["commit"]
    for p in chosen:
        if p.get("argv") is None:  # a run from Python that no command line can say
            print(f"reproduce: cannot rerun {p['command']}: rerun it from Python", file=sys.stderr)
            return 2
        cmd = with_files_of(with_out(p["argv"], out), args.folder)
        made = (p.get("git") or {}).get("commit")
        note = "" if made == here else f" (made at commit {str(made)[:12]}, rerun at {str(here)[:12]})"
        script = p.get("made_from") == "script"  # a script's table (tlgeo.runner.provenance.record_table)
        print(("$ python " if script else "$ tlgeo ") + " ".join(cmd) + note, flush=True)
        if not args.dry_run and (rerun(cmd, script=True) if script else rerun(cmd)) != 0:
            print(f"reproduce: the command failed: {p['command']}", file=sys.stderr)
            return COMMAND_FAILED
    if args.dry_run:
        return 0
    old, new = _csvs(args.folder), _csvs(out)
    differ = 0
    for name in sorted(set(old) & set(new)):
        why = compare_tables(pd.read_csv(old[name]), pd.read_csv(new[name]), rtol=args.rtol, atol=args.atol)
        print(f"{'same' if why is None else 'DIFFERS'}  {name}" + ("" if why is None else f": {why}"))
        differ += why is not None
    for name in sorted(set(old) - set(new)):
        print(f"not rerun  {name} (no command of the chosen lines writes it)")
    print(f"{len(set(old) & set(new)) - differ} table(s) reproduced, {differ} differ; rerun in {out}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
