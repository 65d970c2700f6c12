"""Work shared by the pytest-xdist workers of one test run (each worker is its own process, with its
own session fixtures)."""

from __future__ import annotations

import os
from pathlib import Path

from filelock import FileLock


def shared_folder(tmp_path_factory, name: str) -> tuple[Path, FileLock]:
    """A folder ``name`` of this test run, the same for every worker (this session's own without
    pytest-xdist), and its lock: the first worker to hold the lock makes what the folder is to hold,
    the others wait on it and read it."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    root = tmp_path_factory.getbasetemp().parent / f"{name}-{run_id}" if run_id else tmp_path_factory.mktemp(name)
    root.mkdir(parents=True, exist_ok=True)
    return root, FileLock(str(root / "lock"))
