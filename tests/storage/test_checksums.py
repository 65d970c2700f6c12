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


def test_a_check_never_rewrites_the_seal(sealed):
    """A sealed folder under git (the model zoo) stays as committed when a fresh clone's first check hashes its
    files again (new inodes): what changes is the status file beside the seal, which git ignores."""
    import json
    import shutil
    import subprocess

    copy = sealed.parent / "copy"
    shutil.copytree(sealed, copy)  # new inodes, as a clone has
    (copy / checksums.STATUS).unlink()
    seal_bytes = (copy / checksums.MANIFEST).read_bytes()
    assert "status" not in json.loads(seal_bytes)["files"]["w.bin"]
    assert verify(copy) == [] and (copy / checksums.MANIFEST).read_bytes() == seal_bytes
    assert set(json.loads((copy / checksums.STATUS).read_text())) == {"w.bin", "sub/c.json"}
    root = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"],
        capture_output=True,
        text=True,
        cwd=checksums.__file__.rsplit("/", 1)[0],
    ).stdout.strip()
    ignored = subprocess.run(["git", "check-ignore", "-q", f"zoo/induction-llama/{checksums.STATUS}"], cwd=root)
    assert ignored.returncode == 0, "git must ignore the status file"


def test_a_seal_with_its_statuses_inline_is_still_read(sealed, monkeypatch):
    """Seals made before the status file held each file's status inline: they are used, not hashed again."""
    import json

    man = json.loads((sealed / checksums.MANIFEST).read_text())
    status = json.loads((sealed / checksums.STATUS).read_text())
    for name, entry in man["files"].items():
        entry["status"] = status[name]
    (sealed / checksums.MANIFEST).write_text(json.dumps(man))
    (sealed / checksums.STATUS).unlink()
    calls = []
    monkeypatch.setattr(checksums, "file_digest", lambda p: calls.append(p))
    assert verify(sealed) == [] and calls == []
