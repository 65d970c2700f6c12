"""The documentation: the Sphinx site builds with warnings as errors, its generated pages are the
code's, and the README keeps to its length."""

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
    """The index page in headless Chromium at page width, where a browser is installed."""
    import pytest

    from .scripts import load_script

    shots = load_script("screenshot_report")
    if shots.find_chromium(None) is None:
        pytest.skip("no Chromium on this machine: the site is built and checked, not rendered")
    (png,) = shots.shoot(site / "index.html", site / "shots", [1000], prefix="index")
    assert png.stat().st_size > 10_000
    dom, requests = shots.render(shots.find_chromium(None), site / "index.html", profile=site / "profile")
    assert shots.network_requests(requests) == [], requests  # the site is read offline: nothing from a CDN
    heading = re.search(r"<h1[^>]*>(.*?)</h1>", dom, re.S)
    assert heading is not None and "tlgeo" in re.sub(r"<[^>]+>", "", heading.group(1))


def test_the_readme_is_short_and_its_links_resolve():
    import re

    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if not link.startswith("http"):
            assert (ROOT / link).exists(), f"README links to {link}, which does not exist"
