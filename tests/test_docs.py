"""The documentation: the Sphinx site builds with warnings as errors, its generated pages are the
code's, its index renders in headless Chromium offline (where one is installed), and the README keeps to its
length."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_site_builds_without_warnings_and_has_a_page_per_analysis(tmp_path, capsys):
    from sphinx.cmd.build import build_main

    def generated() -> dict:  # each page's lines, sorted: a registry's order may follow what a test imported first
        return {p: sorted(p.read_text().splitlines()) for p in (ROOT / "docs/_generated").glob("*.md")}

    before = generated()
    # in this process (tlgeo and torch already imported), as `python -m sphinx -W -b html docs OUT` runs it
    code = build_main(["-W", "-q", "-b", "html", str(ROOT / "docs"), str(tmp_path)])
    assert code == 0, capsys.readouterr().err[-3000:]
    pages = {p.stem for p in (tmp_path / "analyses").glob("*.html")}
    from tlgeo.report.registry import load_analyses

    assert {"decomposition", "dirmag", "pdsf", "tokenwise", "patching", "geometries", "compression"} <= pages
    analyses = load_analyses()
    decomposition = {n for n, a in analyses.items() if a.run.__module__.startswith("tlgeo.decomposition.")}
    assert set(analyses) - decomposition <= pages, pages  # one page per analysis package
    page = (ROOT / "docs" / "analyses" / "decomposition.md").read_text()  # its commands, one page
    assert all(f"tlgeo {analyses[n].command_name}" in page for n in decomposition - {"decomposition"}), decomposition
    index = (tmp_path / "index.html").read_text()
    assert "Direction vs magnitude" in index and "Command-line reference" in index
    # the API reference, from the docstrings: the public names, and each analysis's config, run and result
    import tlgeo

    api = (tmp_path / "_generated" / "api.html").read_text()
    documented = set(re.findall(r'<dt class="sig[^>]*id="([^"]+)"', api))
    for a in analyses.values():
        for obj in (a.config, a.run, a.result):
            assert f"{obj.__module__}.{obj.__qualname__}" in documented, (a.name, obj)
    assert {n for n in tlgeo.__all__ if callable(getattr(tlgeo, n))} <= {d.rsplit(".", 1)[1] for d in documented}
    assert "Scale the parallel and perpendicular parts of the update" in api  # a docstring, rendered
    # the generated pages committed for readers of the repository are the ones the build makes
    assert before == generated(), "docs/_generated is stale: build the docs and commit it"
    _render_index(tmp_path)


def _render_index(site: Path) -> None:
    """The index page in headless Chromium, where a browser is installed (``scripts/screenshot_report.py``'s
    ``render``, as ``tests/report/test_render_chromium.py`` renders the atlas report): its title and heading in
    the DOM after the theme's scripts ran, a screenshot, and nothing asked of the network."""
    import pytest

    from .scripts import load_script

    shots = load_script("screenshot_report")
    chromium = shots.find_chromium(None)
    if chromium is None:
        pytest.skip(
            "no chromium, chromium-browser or google-chrome on PATH: the site is built and checked, "
            "not rendered (apt-get install chromium)"
        )
    shown = shots.render(
        chromium,
        site / "index.html",
        profile=site / "shots" / "profile",
        width=1000,
        height=2000,
        png=site / "shots" / "index.png",
        timeout=60,
        wait_ms=3000,
    )
    assert shown.requests == [], f"the docs index asks the network for {shown.requests}"
    assert "<title>tlgeo</title>" in shown.dom and re.search(r"<h1>tlgeo<a [^>]*>", shown.dom)
    assert '<body data-theme="auto">' in shown.dom  # set by the theme's script: the scripts ran
    assert "Direction vs magnitude" in shown.dom and "Command-line reference" in shown.dom  # the contents
    png = shown.png.read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_the_readme_is_short_and_its_links_resolve():
    import re

    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if not link.startswith("http"):
            assert (ROOT / link).exists(), f"README links to {link}, which does not exist"


def test_the_api_reference_holds_every_name_the_docs_import():
    """Issue 67: every function or class a page of the docs (or the README) imports from tlgeo is documented in the
    API reference (``docs/_generated/api.md``, made by the docs build), under the module that defines it."""
    import importlib

    api = (ROOT / "docs" / "_generated" / "api.md").read_text()
    documented = set(re.findall(r"^\.\. auto(?:class|function):: (\S+)$", api, flags=re.M))
    pages = [p for p in (ROOT / "docs").rglob("*.md") if "_generated" not in p.parts] + [ROOT / "README.md"]
    missing, seen = [], 0
    for page in pages:
        for module, names in re.findall(r"^from (tlgeo[\w.]*) import ([^\n(]+)$", page.read_text(), flags=re.M):
            for name in (n.strip() for n in names.split("#")[0].split(",")):
                value = getattr(importlib.import_module(module), name)
                if not callable(value):
                    continue
                seen += 1
                if f"{value.__module__}.{value.__qualname__}" not in documented:
                    missing.append(f"{page.relative_to(ROOT)}: {module}.{name}")
    assert seen > 20 and not missing, missing
    for name in ("task_from_texts", "build_task", "Task", "path_runs", "path_sweep", "path_effects"):
        assert any(d.endswith("." + name) for d in documented), name


def test_the_docs_name_only_files_that_exist():
    """A docs page, ARCHITECTURE.md or the README that names a file of the repository (`tlgeo/...py`, `scripts/...`,
    `results/...`, `tests/...`) names one that exists (docs/layout.md once named three that did not)."""
    pattern = re.compile(r"(?<![\w./-])((?:tlgeo|scripts|tests|results|notebooks|zoo)/[\w./-]*\w)")
    pages = [
        ROOT / "README.md",
        ROOT / "ARCHITECTURE.md",
        ROOT / "RESULTS.md",
        *(p for p in (ROOT / "docs").rglob("*.md") if "_generated" not in p.parts),
    ]
    missing = []
    for page in pages:
        text = page.read_text()
        for m in pattern.finditer(text):
            path, after = m.group(1).rstrip("."), text[m.end() : m.end() + 2]
            if after[:1] in "<{*" or after in ("-<", "_<", "-{", "-*") or "normgrowth" in path:
                continue  # a pattern, a placeholder or ARCHITECTURE.md's worked example, not a file
            if not (ROOT / path).exists() and not (ROOT / path).with_suffix(".py").exists():
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert not missing, "pages name files that do not exist:\n" + "\n".join(sorted(missing))
