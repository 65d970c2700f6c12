"""One writer per folder: a second process is refused in one line; a killed holder's lock is taken over."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tlgeo.storage import LOCK_NAME, FolderBusyError, folder_lock, held_folders


def _holding_child(folder, ready):
    """A forked child that takes ``folder`` and sleeps; returns its pid once it holds it."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        folder_lock(folder).acquire("tlgeo test-holder")
        os.write(w, b"1")
        time.sleep(60)
        os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"1"
    os.close(r)
    return pid


def test_a_second_writer_is_refused_then_a_killed_holders_lock_is_taken(tmp_path):
    pid = _holding_child(tmp_path, None)
    try:
        with pytest.raises(FolderBusyError) as e:
            folder_lock(tmp_path).acquire("tlgeo second")
        msg = str(e.value)
        assert "\n" not in msg and f"process {pid}" in msg and "tlgeo test-holder" in msg and str(tmp_path) in msg
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    with folder_lock(tmp_path).acquire("tlgeo third"):  # the kernel let go of the dead one's flock
        assert str(os.getpid()) in (tmp_path / LOCK_NAME).read_text()
    assert not (tmp_path / LOCK_NAME).exists()  # released: no lock file left behind


def test_a_waiting_writer_takes_the_folder_when_its_holder_lets_go(tmp_path):
    """``wait=True`` (a shared cache filled by one process at a time: compression's models) blocks until the
    holder is gone, then holds the folder itself; without it, the same moment is a refusal."""
    import threading

    pid = _holding_child(tmp_path, None)
    with pytest.raises(FolderBusyError):
        folder_lock(tmp_path).acquire("tlgeo impatient")
    threading.Timer(0.5, lambda: os.kill(pid, signal.SIGKILL)).start()
    start = time.monotonic()
    try:
        with folder_lock(tmp_path).acquire("tlgeo patient", wait=True):
            waited = time.monotonic() - start
            assert str(os.getpid()) in (tmp_path / LOCK_NAME).read_text()
    finally:
        os.waitpid(pid, 0)
    assert waited >= 0.4 and not (tmp_path / LOCK_NAME).exists()


def test_the_lock_nests_within_a_process(tmp_path):
    a = folder_lock(tmp_path).acquire()
    b = folder_lock(tmp_path / ".." / tmp_path.name).acquire()  # the same folder by another path
    assert a.lock is b.lock and a.lock.count == 2 and tmp_path.resolve() in held_folders()
    b.release()
    b.release()  # a hold lets go once
    assert a.lock.count == 1
    with folder_lock(tmp_path).acquire():
        assert a.lock.count == 2
    assert a.lock.count == 1
    a.release()
    assert tmp_path.resolve() not in held_folders()


def test_a_file_system_without_flock_writes_unguarded_and_says_so(tmp_path, monkeypatch, capsys):
    import errno

    from tlgeo.storage import lock as L

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(L.fcntl, "flock", no_locks)
    with folder_lock(tmp_path / "nfs").acquire("tlgeo x"):
        pass
    err = capsys.readouterr().err
    assert "cannot be locked (No locks available)" in err and "not refused" in err
