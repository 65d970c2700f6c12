"""The kill harness: run a tlgeo command, SIGKILL it at seeded moments, rerun it into the same folder
until it finishes, and compare every table with an uninterrupted run's, row for row.

Each run is a process forked from a fork server that has imported tlgeo's commands once
(:mod:`tests.faults.preload`), with one torch thread, so that a run's tables do not depend on timing.
A kill comes either at a moment of wall time (uniform over the uninterrupted run's duration) or in the
middle of the k-th write through :mod:`tlgeo.storage.files` (half the bytes written and synced, then
SIGKILL: a torn file or log line, the worst a kill can leave). ``tests/faults/test_kills.py`` runs a
short seeded set in the test suite; ``scripts/bench_faults.py`` runs hundreds. :func:`truncate_series` damages a
finished folder instead: a results table cut at a seeded byte, then the same command rerun into it.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import random
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
_CTX = None


def _context():
    """Processes forked from a fork server that imports tlgeo's commands once (:mod:`tests.faults.preload`):
    each run starts in milliseconds. (A test worker forked itself once, while a fuzzed ``--threads`` had given it
    hundreds of torch threads, and crashed: the server is a process that has run nothing.)"""
    global _CTX
    if _CTX is None:
        if str(ROOT) not in sys.path:
            sys.path.insert(0, str(ROOT))
        _CTX = multiprocessing.get_context("forkserver")
        _CTX.set_forkserver_preload(["tests.faults.preload"])
        warm = _CTX.Process(target=_nothing)  # the fork server starts (and imports) now, not inside a timed run
        warm.start()
        warm.join()
    return _CTX


def _nothing() -> None:
    pass


@dataclasses.dataclass(frozen=True)
class Case:
    """One command: ``argv`` without ``--out`` (the harness adds it)."""

    name: str
    argv: tuple[str, ...]


def analysis_cases(model: str = "tiny:llama") -> list[Case]:
    """Every registered analysis's command on ``model``, with its ``tiny`` config (where flags can say it)."""
    from tlgeo.runner.analysis import analyses
    from tlgeo.cli import build_parser
    from tlgeo.runner.cliargs import config_argv

    build_parser()
    out = []
    for a in analyses().values():
        try:
            flags = config_argv(a.config(**a.tiny))
        except ValueError:  # a tiny config no flags can say (compression's nested compression settings)
            continue
        out.append(Case(a.command_name, (a.command_name, "--model", model, *flags)))
    return out


def _child(
    argv: list[str],
    kill_write: int | None,
    stats: str,
    log,
    fsize: int | None,
    stdout: bool = True,
    env: dict | None = None,
) -> None:
    """In the forked process: ``tlgeo <argv>``, killed mid-way through its ``kill_write``-th write; ``fsize``:
    from its first result write on, no file may grow beyond that many bytes (a disk that fills up, as
    ``RLIMIT_FSIZE``); ``env``: set first (a rank's torchrun variables)."""
    import resource

    os.environ.update(env or {})

    import torch

    from tlgeo.cli import main
    from tlgeo.storage import files

    torch.set_num_threads(1)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as in a terminal, whatever the parent set
    if stdout:
        os.dup2(log.fileno(), 1)  # a pipe, not a file: the file-size limit is the run's files' only
    else:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # not a test runner's capture, inherited by a fork
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    real, count = files._write, [0]

    def write(f, data):
        count[0] += 1
        if fsize is not None and count[0] == 1:  # the disk fills once results are written (the model is loaded)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        if count[0] == kill_write:
            real(f, data[: len(data) // 2])
            f.flush()
            os.fsync(f.fileno())
            os.kill(os.getpid(), signal.SIGKILL)
        real(f, data)

    files._write = write
    rc = main(list(argv))
    Path(stats).write_text(json.dumps({"writes": count[0]}))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


@dataclasses.dataclass
class Run:
    rc: int | None  # None: killed
    seconds: float
    writes: int | None  # the writes of a run that finished
    log: str = ""  # what it printed


def run_once(
    case: Case,
    out: Path,
    *,
    kill_after: float | None = None,
    kill_write: int | None = None,
    fsize: int | None = None,
    interrupt_when: Path | None = None,
    expect_error: bool = False,
    stdout: bool = True,
) -> Run:
    """One run of ``case`` into ``out``: killed after ``kill_after`` seconds or in its ``kill_write``-th write
    (if it is still running then), else to the end; ``fsize``: a file-size limit; ``interrupt_when``: Ctrl-C
    (SIGINT) once that file has something in it; ``stdout=False``: its log is its stderr alone. A run that
    fails raises, unless ``expect_error``."""
    ctx = _context()
    out.mkdir(parents=True, exist_ok=True)
    stats = out.parent / f".{out.name}.stats"
    stats.unlink(missing_ok=True)
    read_end, write_end = ctx.Pipe(duplex=False)
    p = ctx.Process(
        target=_child, args=([*case.argv, "--out", str(out)], kill_write, str(stats), write_end, fsize, stdout)
    )
    chunks: list[bytes] = []
    reader = threading.Thread(target=_drain, args=(read_end, chunks), daemon=True)
    t0 = time.perf_counter()
    p.start()
    write_end.close()
    reader.start()
    if interrupt_when is not None:
        deadline = time.monotonic() + 120
        while (
            not (interrupt_when.exists() and interrupt_when.stat().st_size)
            and p.is_alive()
            and time.monotonic() < deadline
        ):
            time.sleep(0.02)
        if p.is_alive():
            os.kill(p.pid, signal.SIGINT)
    p.join(kill_after)
    if p.is_alive():
        p.kill()
        p.join()
    seconds = time.perf_counter() - t0
    reader.join(10)
    read_end.close()
    text = b"".join(chunks).decode(errors="replace")
    if p.exitcode == -signal.SIGKILL:
        return Run(None, seconds, None, text)
    if p.exitcode != 0 and not expect_error:
        raise RuntimeError(f"{case.name}: exit code {p.exitcode}: {text[-2000:]}")
    return Run(p.exitcode, seconds, json.loads(stats.read_text())["writes"] if stats.exists() else None, text)


def run_ranks(
    case: Case, out: Path, *, size: int = 2, kill_rank: int | None = None, kill_write: int | None = None
) -> list[Run]:
    """``case`` as ``size`` ranks of one job, as torchrun starts them (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``
    and ``MASTER_PORT`` set; a gloo process group), forked from the fork server: rank ``kill_rank`` is killed in
    the middle of its ``kill_write``-th write. One :class:`Run` per rank (its log: what it printed)."""
    import socket

    ctx = _context()
    out.mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(size):
        env = {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(size),
            "LOCAL_WORLD_SIZE": str(size),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "TLGEO_DIST_TIMEOUT": "120",
        }
        read_end, write_end = ctx.Pipe(duplex=False)
        stats = out.parent / f".{out.name}.rank{rank}.stats"
        stats.unlink(missing_ok=True)
        p = ctx.Process(
            target=_child,
            args=(
                [*case.argv, "--out", str(out)],
                kill_write if rank == kill_rank else None,
                str(stats),
                write_end,
                None,
                True,
                env,
            ),
        )
        chunks: list[bytes] = []
        reader = threading.Thread(target=_drain, args=(read_end, chunks), daemon=True)
        p.start()
        write_end.close()
        reader.start()
        procs.append((p, reader, read_end, chunks, stats))
    runs = []
    for p, reader, read_end, chunks, stats in procs:
        p.join(300)
        if p.is_alive():
            p.kill()
            p.join()
        reader.join(10)
        read_end.close()
        text = b"".join(chunks).decode(errors="replace")
        killed = p.exitcode == -signal.SIGKILL
        runs.append(
            Run(
                None if killed else p.exitcode,
                0.0,
                json.loads(stats.read_text())["writes"] if stats.exists() else None,
                text,
            )
        )
    return runs


def _drain(conn, chunks: list[bytes]) -> None:
    while True:
        try:
            b = os.read(conn.fileno(), 65536)
        except OSError:
            return
        if not b:
            return
        chunks.append(b)


def volatile_columns() -> set[str]:
    """Columns that differ between two runs of the same work (timings), from every analysis's tables."""
    from tlgeo.runner.analysis import analyses

    cols = {"wall_s", "seconds", "elapsed_s"}
    for a in analyses().values():
        for t in a.result.TABLES:
            cols.update(t.volatile)
    return cols


def read_tables(folder: Path) -> dict[str, pd.DataFrame]:
    """Every result table in ``folder`` (not the rank folders), without volatile columns, rows as text."""
    drop = volatile_columns()
    out = {}
    for p in sorted([*folder.glob("*.csv"), *folder.glob("*.csv.gz")]):
        if p.name == "timings.csv":
            continue
        df = pd.read_csv(p, dtype=str, keep_default_na=False)
        out[p.name] = df.drop(columns=[c for c in df.columns if c in drop])
    return out


@dataclasses.dataclass
class Comparison:
    identical: bool
    rows_lost: int  # rows of the uninterrupted run missing from the resumed one
    rows_extra: int  # rows the resumed one has beyond them (duplicated or of other values)
    detail: str


def compare(reference: dict[str, pd.DataFrame], got: dict[str, pd.DataFrame]) -> Comparison:
    """Table by table, as multisets of rows (the order of rows may differ after a resume)."""
    lost = extra = 0
    notes = []
    for name in sorted(set(reference) | set(got)):
        a, b = reference.get(name), got.get(name)
        if a is None or b is None:
            notes.append(f"{name}: {'missing' if b is None else 'not in the uninterrupted run'}")
            lost += 0 if a is None else len(a)
            extra += 0 if b is None else len(b)
            continue
        if list(a.columns) != list(b.columns):
            notes.append(f"{name}: columns {list(b.columns)} vs {list(a.columns)}")
            lost, extra = lost + len(a), extra + len(b)
            continue
        ra = a.apply(lambda r: "\x1f".join(r), axis=1).value_counts() if len(a) else pd.Series(dtype=int)
        rb = b.apply(lambda r: "\x1f".join(r), axis=1).value_counts() if len(b) else pd.Series(dtype=int)
        diff = ra.sub(rb, fill_value=0)
        n_lost, n_extra = int(diff[diff > 0].sum()), int(-diff[diff < 0].sum())
        if n_lost or n_extra:
            notes.append(f"{name}: {n_lost} rows lost, {n_extra} extra")
        lost, extra = lost + n_lost, extra + n_extra
    return Comparison(not notes, lost, extra, "; ".join(notes))


@dataclasses.dataclass
class Series:
    case: str
    kills_tried: int  # kills that struck a running process
    runs: int
    comparison: Comparison


def kill_series(
    case: Case,
    folder: Path,
    reference: dict[str, pd.DataFrame],
    ref_run: Run,
    *,
    kills: int,
    seed: int,
    mode: str = "mixed",
    max_runs: int = 50,
) -> Series:
    """Run ``case`` into ``folder`` with ``kills`` kills at seeded moments (``mode``: ``time``, ``write`` or
    ``mixed``, alternating), then rerun it until it finishes; compare its tables with ``reference``."""
    rng = random.Random(seed)
    tried = runs = 0
    for i in range(3 * kills):  # a kill that came after the run finished struck nothing: start that folder again
        if i >= kills and tried:
            break
        by_write = mode == "write" or (mode == "mixed" and i % 2 == 1)
        if by_write:
            r = run_once(case, folder, kill_write=rng.randint(1, max(ref_run.writes or 1, 1)))
        else:
            r = run_once(case, folder, kill_after=rng.uniform(0.05, 0.7) * ref_run.seconds)
        runs += 1
        tried += r.rc is None
        if not tried and r.rc is not None:  # finished before any kill (a faster run than the reference)
            shutil.rmtree(folder, ignore_errors=True)
    while True:
        r = run_once(case, folder)
        runs += 1
        if r.rc is not None or runs >= max_runs:
            break
    return Series(case.name, tried, runs, compare(reference, read_tables(folder)))


def reference_run(case: Case, folder: Path) -> tuple[dict[str, pd.DataFrame], Run]:
    """An uninterrupted run into a fresh ``folder``: its tables and its run."""
    shutil.rmtree(folder, ignore_errors=True)
    r = run_once(case, folder)
    return read_tables(folder), r


@dataclasses.dataclass
class Truncation:
    case: str
    table: str
    size: int  # the table's bytes as the uninterrupted run wrote them
    cut: int  # the bytes kept
    rc: int | None  # the rerun's exit code
    errors: list[str]  # the rerun's error lines
    comparison: Comparison | None  # the rerun's tables against the uninterrupted run's (None: the rerun refused)
    untouched: bool  # a refused rerun left the cut table as it found it

    @property
    def ok(self) -> bool:
        """Rebuilt to the uninterrupted run's tables, or refused in one line naming the table (and nothing changed)."""
        if self.rc == 0:
            return self.comparison is not None and self.comparison.identical
        return self.rc == 2 and len(self.errors) == 1 and self.table in self.errors[0] and self.untouched


def truncate_series(
    case: Case, reference_folder: Path, folder: Path, *, seed: int, tables: list[str] | None = None, cuts: int = 1
) -> list[Truncation]:
    """For each result table of ``reference_folder`` (an uninterrupted run of ``case``; or each of ``tables``): a
    copy of the folder with that table cut in half, then ``cuts`` times at a seeded byte (anywhere from 0 to its
    size less one), each time the same command rerun into it, its tables compared with the uninterrupted run's."""
    rng = random.Random(seed)
    reference = read_tables(reference_folder)
    out = []
    for name in sorted(reference) if tables is None else tables:
        size = (reference_folder / name).stat().st_size
        for cut in [size // 2, *(rng.randrange(0, size) for _ in range(cuts))]:
            shutil.rmtree(folder, ignore_errors=True)
            shutil.copytree(reference_folder, folder)
            target = folder / name
            with open(target, "r+b") as f:
                f.truncate(cut)
            damaged = target.read_bytes()
            r = run_once(case, folder, expect_error=True)
            errors = [line for line in r.log.splitlines() if "error:" in line]
            comparison = None
            if r.rc == 0:
                try:
                    comparison = compare(reference, read_tables(folder))
                except (ValueError, EOFError, OSError) as e:  # a table left as it was cut
                    comparison = Comparison(False, 0, 0, f"a table does not read: {type(e).__name__}: {e}")
            out.append(
                Truncation(
                    case.name,
                    name,
                    size,
                    cut,
                    r.rc,
                    errors,
                    comparison,
                    target.exists() and target.read_bytes() == damaged,
                )
            )
    return out
