"""A rank killed mid-write under torchrun: the survivor says in one line which rank died, nothing saved is
half-written, and the same command rerun on two ranks (first in the shared launch) ends with the tables of
an uninterrupted two-rank run of the same config (which the data-parallel test holds equal to one process)."""

from __future__ import annotations

import re

import pandas as pd

from tests.faults.kill import compare, read_tables


def test_a_dying_rank_is_one_line_and_a_rerun_completes(torchrun_launch):
    out, result = torchrun_launch
    dying = result["dying"]
    said = [line for line in dying["stderr"].splitlines() if line.startswith("tlgeo dirmag: error:")]
    assert dying["returncode"] != 0 and len(said) == 1, dying["stderr"][-3000:]
    assert re.search(r"rank 1 \(pid \d+\) has died", said[0]) and "Rerun the same command to resume" in said[0], said
    assert result["returncode"] == 0, result["stderr"][-3000:]  # the shared launch's rerun of it finished
    folder = out / "dying"
    for p in folder.rglob("*.csv"):
        pd.read_csv(p)  # every saved table is whole
    assert not [p for p in folder.rglob("*") if p.name.endswith(".tmp")]  # the rerun cleared the dead one's half file
    c = compare(read_tables(out / "analyses" / "dirmag"), read_tables(folder))
    assert c.identical, c.detail
