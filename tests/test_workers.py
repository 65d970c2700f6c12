"""The test run's own set-up: each test starts on its pytest-xdist worker's share of the cores."""

import torch

from . import conftest


def test_a_test_starts_on_the_workers_threads_whatever_the_test_before_set():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(conftest._THREADS + 2)  # as a command's --threads, or a module's import, would
        conftest.pytest_runtest_setup(None)
        assert torch.get_num_threads() == conftest._THREADS
    finally:
        torch.set_num_threads(before)


def test_no_test_module_sets_torch_threads_at_import():
    """A module-level ``torch.set_num_threads`` runs in every worker at collection, before any test."""
    from pathlib import Path

    offenders = [
        str(p)
        for p in Path(__file__).parent.rglob("test_*.py")
        if any(line.startswith("torch.set_num_threads") for line in p.read_text().splitlines())
    ]
    assert not offenders, offenders
