"""Offline corpora: data directory resolution, named corpora, files, hub specs, errors."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from tlgeo import data
from tlgeo.data import CORPORA, UnknownCorpusError, data_dir, load_documents, load_text


def test_data_dir_default_holds_the_corpora(monkeypatch):
    monkeypatch.delenv(data.DATA_ENV_VAR, raising=False)
    d = data_dir()
    assert (d / "README.md").is_file()
    for rel in CORPORA.values():
        assert (d / rel).is_file(), rel


def test_env_var_overrides_data_dir(monkeypatch, tmp_path):
    (tmp_path / "corpora").mkdir()
    (tmp_path / "corpora" / "austen.txt").write_text("Not really Austen.\n")
    monkeypatch.setenv(data.DATA_ENV_VAR, str(tmp_path))
    assert data_dir() == tmp_path
    assert load_text("austen") == "Not really Austen.\n"


def test_env_var_pointing_nowhere_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv(data.DATA_ENV_VAR, str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="TLGEO_DATA"):
        data_dir()


def test_no_data_dir_names_the_env_var(monkeypatch, tmp_path):
    monkeypatch.delenv(data.DATA_ENV_VAR, raising=False)
    monkeypatch.setattr(data, "_REPO_DATA_DIR", tmp_path / "missing")
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    with pytest.raises(FileNotFoundError, match="TLGEO_DATA"):
        data_dir()
    (tmp_path / "a" / "shared" / "data").mkdir(parents=True)  # ../shared/data from the CWD
    assert data_dir() == (tmp_path / "a" / "shared" / "data").resolve()


def test_austen_is_clean_text():
    text = load_text("austen")
    assert len(text) > 1_000_000
    assert "\r" not in text
    assert text.startswith("EMMA")


def test_wikitext2_crlf_is_normalised():
    text = load_text("wikitext2")
    assert "\r" not in text
    assert "Robert Boulter" in text[:200]
    assert text.count("\n") == 2891  # one line per CRLF line of the export


@pytest.mark.parametrize("name", sorted(CORPORA))
def test_every_named_corpus_loads(name):
    text = load_text(name, max_chars=2000)
    assert len(text) == 2000 and "\r" not in text


def test_unknown_name_lists_known_names():
    with pytest.raises(UnknownCorpusError, match="austen") as e:
        load_text("shakespeare")
    assert isinstance(e.value, ValueError)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_text(tmp_path / "nothing.txt")
    with pytest.raises(FileNotFoundError):
        load_text(str(tmp_path / "nothing.txt"))


def test_file_path_and_newlines(tmp_path):
    p = tmp_path / "doc.txt"
    p.write_bytes(b"one\r\ntwo\rthree\n\n\r\nfour\n")
    assert load_text(p) == "one\ntwo\nthree\n\n\nfour\n"
    assert load_text(str(p), max_chars=7) == "one\ntwo"
    assert load_documents(p) == ["one\ntwo\nthree", "four"]


@pytest.mark.parametrize("content", ["", " \n\n\t\n"])
def test_empty_corpus(tmp_path, content):
    p = tmp_path / "empty.txt"
    p.write_text(content)
    with pytest.raises(ValueError, match="empty corpus"):
        load_text(p)


def test_max_chars_zero_is_empty():
    with pytest.raises(ValueError, match="empty corpus"):
        load_text("austen", max_chars=0)


def test_hub_spec_goes_to_load_dataset(monkeypatch):
    calls = []

    class FakeDataset:
        column_names = ["text"]

        def __getitem__(self, key):
            assert key == "text"
            return ["first", "", "second"]

    def load_dataset(name, config=None, split=None):
        calls.append((name, config, split))
        return FakeDataset()

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    assert load_text("hf:wikitext:wikitext-2-raw-v1:validation") == "first\n\n\n\nsecond"
    assert load_text("hf:some/corpus", max_chars=3) == "fir"
    assert calls == [("wikitext", "wikitext-2-raw-v1", "validation"), ("some/corpus", None, "test")]
    with pytest.raises(UnknownCorpusError):
        load_text("hf:")


def test_corpus_path_is_inside_data_dir():
    assert data.corpus_path("mobydick") == data_dir() / "corpora" / "mobydick.txt"
    assert isinstance(data.corpus_path("bible"), Path)


def test_an_unreachable_hub_corpus_is_one_clear_error(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'wikitext' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(
        UnknownCorpusError,
        match=r"hub corpus 'hf:wikitext' cannot be loaded \(ConnectionError.*"
        r"named corpora \[",
    ):
        load_text("hf:wikitext")
