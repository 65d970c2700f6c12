"""Sealed folders: a truncated file or one changed byte is found; an untouched file is not hashed again."""

from __future__ import annotations

import pytest

from tlgeo.storage import CorruptFileError, check, seal, verify
from tlgeo.storage import checksums


@pytest.fixture
def sealed(tmp_path):
    (tmp_path / "w.bin").write_bytes(bytes(range(256)) * 64)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.json").write_text('{"a": 1}')
    seal(tmp_path)
    return tmp_path


def test_a_whole_folder_verifies(sealed):
    assert verify(sealed) == [] and verify(sealed, full=True) == []
    check(sealed, "the cache")


def test_a_truncated_file_is_found(sealed):
    with open(sealed / "w.bin", "r+b") as f:
        f.truncate(100)
    assert verify(sealed) == ["w.bin: 100 bytes, sealed with 16,384"]
    with pytest.raises(CorruptFileError, match=r"^the cache .* is damaged: w.bin: 100 bytes"):
        check(sealed, "the cache")


def test_one_changed_byte_is_found(sealed):
    with open(sealed / "sub" / "c.json", "r+b") as f:
        f.seek(6)
        f.write(b"2")
    assert verify(sealed) == ["sub/c.json: its content changed since it was sealed"]


def test_a_missing_file_and_an_unsealed_folder_are_found(sealed, tmp_path_factory):
    (sealed / "w.bin").unlink()
    assert verify(sealed) == ["w.bin: missing"]
    bare = tmp_path_factory.mktemp("bare")
    assert "not sealed" in verify(bare)[0]


def test_an_untouched_file_is_not_hashed_again(sealed, monkeypatch):
    calls = []
    real = checksums.file_digest
    monkeypatch.setattr(checksums, "file_digest", lambda p: calls.append(p) or real(p))
    assert verify(sealed) == [] and calls == []
    (sealed / "w.bin").write_bytes((sealed / "w.bin").read_bytes())  # the same bytes, written again
    assert verify(sealed) == [] and len(calls) == 1  # its status changed: hashed once, recorded
    assert verify(sealed) == [] and len(calls) == 1
