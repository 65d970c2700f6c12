"""A rerun under an old name with other inputs, as a new user makes one: the same file name, other text."""

from __future__ import annotations


def changed_corpus_runs(run_fn, model, cfg, tmp_path, capsys, field: str = "corpus"):
    """``run_fn`` on a corpus file (named by ``cfg``'s ``field``), then on other text under the same file name
    into the same folder, and on that text into a fresh folder: ``(rerun, fresh, printed lines of the rerun)``."""
    from tlgeo.data import load_text

    text = load_text("austen")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(text[:20_000])
    run_fn(model, cfg.replace(**{field: str(corpus)}), out=tmp_path / "same")
    corpus.write_text(text[40_000:60_000])
    capsys.readouterr()
    again = run_fn(model, cfg.replace(**{field: str(corpus)}), out=tmp_path / "same")
    said = capsys.readouterr().out.splitlines()
    fresh = run_fn(model, cfg.replace(**{field: str(corpus)}), out=tmp_path / "fresh")
    return again, fresh, said
