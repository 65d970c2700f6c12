"""Fuzzed input: random and out-of-range values for every command's flags, and corpus files nobody meant to
give (empty, binary, another encoding, one huge line). Each ends in one line naming the problem before any
work, or in a valid configuration; never a traceback."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .fuzz import WILD, commands, flags, one_try, values, work_stopped

COMMANDS = sorted(commands())


@pytest.fixture(scope="module")
def stopped():
    with work_stopped():
        yield


@pytest.mark.parametrize("command", COMMANDS)
@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_flag_value_is_one_line_or_a_valid_config(stopped, tmp_path, command, data):
    acts = flags(commands()[command])
    act = data.draw(st.sampled_from(acts), label="flag")
    value = data.draw(
        st.one_of(
            st.sampled_from(values(act, random.Random(0), 12) + WILD),
            st.text(max_size=12),
            st.integers(-(10**15), 10**15).map(str),
            st.floats().map(str),
        ),
        label="value",
    )
    kind, what = one_try(command, act.option_strings[-1], value, tmp_path / "o")
    assert kind != "other", what


BAD_FILES = {
    "empty": b"",
    "blank": b" \n\t\n",
    "binary": bytes(range(256)) * 40,
    "latin1": "Caf\xe9 cr\xe8me, na\xefve fa\xe7ade.\n".encode("latin-1") * 50,
    "utf16": "A plain sentence in UTF-16.\n".encode("utf-16") * 50,
    "nul": b"text with \x00 nul bytes\x00 in it. " * 200,
    "one_huge_line": b"word " * 400_000,
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_a_corpus_file_is_read_or_refused_in_one_line(stopped, tmp_path, name):
    path = tmp_path / f"{name}.txt"
    path.write_bytes(BAD_FILES[name])
    kind, what = one_try("decompose", "--corpus", str(path), tmp_path / "o")
    assert kind != "other", what
    if name in ("empty", "blank", "binary", "latin1", "utf16"):
        assert kind == "error" and str(path) in what, what  # refused, naming the file
    else:
        assert kind == "valid"


def test_a_corpus_that_is_a_folder_is_one_line(stopped, tmp_path):
    kind, what = one_try("decompose", "--corpus", str(tmp_path), tmp_path / "o")
    assert kind == "error" and "directory" in what, what
