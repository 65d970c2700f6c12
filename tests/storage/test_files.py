"""Atomic writes, durable appends and the full-disk error, on real files (kills in forked children)."""

from __future__ import annotations

import errno
import gzip
import os
import resource
import signal

import pandas as pd
import pytest

from tlgeo.storage import DiskFullError, append_lines, atomic_write, read_lines, write_csv, write_text
from tlgeo.storage import files


def _in_child(fn) -> int:
    """``fn()`` in a forked child (file operations only); returns its exit status (or -signal)."""
    pid = os.fork()
    if pid == 0:
        try:
            fn()
            os._exit(0)
        except BaseException as e:  # noqa: BLE001
            os.write(2, f"{type(e).__name__}: {e}\n".encode())
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _killed_mid_write(monkeypatch):
    """``files._write`` that writes half its bytes, syncs them and SIGKILLs its process."""
    real = files._write

    def half_then_die(f, data):
        real(f, data[: len(data) // 2])
        f.flush()
        os.fsync(f.fileno())
        os.kill(os.getpid(), signal.SIGKILL)

    monkeypatch.setattr(files, "_write", half_then_die)


def test_a_write_killed_midway_leaves_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "t.csv"
    write_text(path, "a,b\n1,2\n")
    _killed_mid_write(monkeypatch)
    assert _in_child(lambda: write_text(path, "a,b\n" + "3,4\n" * 10_000)) == -signal.SIGKILL
    monkeypatch.undo()
    assert path.read_text() == "a,b\n1,2\n"
    write_text(path, "a,b\n5,6\n")  # the next write of the file replaces the dead one's temporary file
    assert path.read_text() == "a,b\n5,6\n" and sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]


def test_an_exception_inside_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "x.txt"
    write_text(path, "old")
    with pytest.raises(RuntimeError):
        with atomic_write(path) as f:
            f.write("new, half")
            raise RuntimeError("stop")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["x.txt"]


def test_an_append_killed_midway_leaves_a_torn_line_that_reads_as_absent(tmp_path, monkeypatch):
    path = tmp_path / "log.jsonl"
    append_lines(path, ['{"a": 1}', '{"a": 2}'])
    _killed_mid_write(monkeypatch)
    assert _in_child(lambda: append_lines(path, ['{"a": 3}'])) == -signal.SIGKILL
    monkeypatch.undo()
    lines, torn = read_lines(path)
    assert lines == ['{"a": 1}', '{"a": 2}'] and torn
    assert path.read_bytes().endswith(b'{"a"')  # the torn half is really there


def test_a_full_disk_is_one_line_and_the_log_keeps_its_length(tmp_path):
    path, big = tmp_path / "log.jsonl", tmp_path / "big.csv"
    append_lines(path, ["x" * 100])
    write_text(big, "old")
    before = path.read_bytes()

    def fill():
        resource.setrlimit(resource.RLIMIT_FSIZE, (150, 150))  # this child may write files up to 150 bytes
        with pytest.raises(DiskFullError) as e:
            append_lines(path, ["y" * 100])
        msg = str(e.value)
        assert e.value.errno == errno.EFBIG and "\n" not in msg
        assert str(tmp_path) in msg and "log.jsonl" in msg and "101 B" in msg, msg
        with pytest.raises(DiskFullError, match="big.csv"):
            write_text(big, "z" * 1000)

    assert _in_child(fill) == 0
    assert path.read_bytes() == before  # the failed append was cut back: the log is whole
    assert big.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["big.csv", "log.jsonl"]


def test_gzip_csv_is_the_same_bytes_for_the_same_table(tmp_path):
    df = pd.DataFrame({"a": [1, 2], "b": [0.5, float("nan")]})
    write_csv(tmp_path / "a.csv.gz", df)
    first = (tmp_path / "a.csv.gz").read_bytes()
    write_csv(tmp_path / "a.csv.gz", df)
    assert (tmp_path / "a.csv.gz").read_bytes() == first
    assert gzip.decompress(first).decode() == df.to_csv(index=False)
    assert pd.read_csv(tmp_path / "a.csv.gz").equals(df)
