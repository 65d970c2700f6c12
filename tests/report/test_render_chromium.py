"""The tiny atlas report as headless Chromium shows it, offline: the title and the headline in the DOM after
its scripts ran, every circuitsvis view drawn, a screenshot, and nothing asked of the network (read from
Chromium's NetLog by ``scripts/screenshot_report.py``'s :func:`render`; the check is shown to catch a remote
image, script, stylesheet, font, fetch, WebSocket and frame). Skipped where no Chromium is installed
(``apt-get install chromium``). The docs index is rendered the same way by ``tests/test_docs.py``."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from ..scripts import load_script

shots = load_script("screenshot_report")
pytestmark = pytest.mark.skipif(
    shots.find_chromium() is None,
    reason="no chromium, chromium-browser or google-chrome on PATH (apt-get install chromium)",
)

PNG = b"\x89PNG\r\n\x1a\n"


def _render(page: Path, tmp_path: Path, **kw):
    return shots.render(shots.find_chromium(), page, profile=tmp_path / "profile", timeout=60, wait_ms=3000, **kw)


def _text(fragment: str) -> str:
    """A fragment of HTML as a reader sees its text: tags dropped, entities read, spaces collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


REMOTE = {  # one way each for a page to ask the network for something
    "img": '<img src="https://img.example/x.png">',
    "script": '<script src="https://script.example/x.js"></script>',
    "stylesheet": '<link rel="stylesheet" href="http://css.example/x.css">',
    "font": "<style>@font-face{font-family:F;src:url(https://font.example/f.woff2)}body{font-family:F}</style>text",
    "fetch": '<script>fetch("https://fetch.example/api")</script>',
    "websocket": '<script>new WebSocket("wss://ws.example/socket")</script>',
    "iframe": '<iframe src="https://frame.example/"></iframe>',
}


def test_the_network_check_catches_a_remote_load(tmp_path):
    """A page that loads one thing from the network, in each of the ways a page can, is caught (one browser run:
    the page holds them all); a page of ``file:`` and ``data:`` loads asks for nothing."""
    (tmp_path / "local.png").write_bytes(PNG)  # not a valid image: what counts is that it is asked for locally
    remote = tmp_path / "remote.html"
    remote.write_text("<!DOCTYPE html><html><body><h1>Remote</h1>" + "".join(REMOTE.values()) + "</body></html>")
    got = _render(remote, tmp_path).requests
    expected = {
        "img": "https://img.example/x.png",
        "script": "https://script.example/x.js",
        "stylesheet": "http://css.example/x.css",
        "font": "https://font.example/f.woff2",
        "fetch": "https://fetch.example/api",
        "websocket": "wss://ws.example/socket",
        "iframe": "https://frame.example/",
    }
    assert set(expected.values()) <= set(got), got
    assert all(u.startswith(shots.WEB_SCHEMES) for u in got), got

    local = tmp_path / "local.html"
    local.write_text(
        '<!DOCTYPE html><html><body><h1>Local</h1><img src="local.png">'
        '<img src="data:image/png;base64,iVBORw0KGgo="><script>document.body.dataset.ran = "yes"'
        "</script></body></html>"
    )
    shown = _render(local, tmp_path)
    assert shown.requests == [] and 'data-ran="yes"' in shown.dom and "<h1>Local</h1>" in shown.dom


def test_the_atlas_report_renders_offline_with_its_headline(atlas_dir, tmp_path):
    report = atlas_dir / "report.html"
    page = report.read_text(encoding="utf-8")
    shown = _render(report, tmp_path, width=1280, height=2000, png=tmp_path / "atlas.png")
    assert shown.requests == [], f"the report asks the network for {shown.requests}"
    # the title and the headline the report writes (Report.html, Report.headline), as the browser has them
    assert "<title>tlgeo atlas: tiny:llama</title>" in shown.dom
    assert "<h1>tlgeo atlas: tiny:llama</h1>" in shown.dom
    top = shown.dom.index('<section class="headline">')
    assert shown.dom.index("<h1>") < top < shown.dom.index("1. How parallel")
    assert re.match(
        r'<section class="headline"><h2>Headline</h2><div class="warn"><strong>Read first</strong>', shown.dom[top:]
    )
    caveat = "tiny:llama is a tiny model with random weights: the report tests the machinery"
    assert caveat in html.unescape(shown.dom[top : shown.dom.index("</section>", top)])
    # word for word the headline the atlas wrote (tags dropped, entities read, spaces collapsed)
    section = re.compile(r'<section class="headline">.*?</section>', re.S)
    assert _text(section.search(shown.dom).group(0)) == _text(section.search(page).group(0))
    # the scripts ran: every circuitsvis view, an empty div in the file, is drawn into by the inlined bundle
    views = re.findall(r'<div id="([^"]+)" style="margin: 15px 0;"></div>', page)
    assert views
    for view in views:
        drawn = re.search(rf'<div id="{re.escape(view)}"[^>]*>(.*?)</div>', shown.dom, flags=re.S)
        assert drawn and drawn.group(1).strip(), f"circuitsvis view {view} was not drawn"
    png = shown.png.read_bytes()
    assert png.startswith(PNG) and len(png) > 10_000
    # the check on this page: with circuitsvis' bundle loaded from its CDN (as ``str(view)`` writes it) instead
    # of inlined, the report asks unpkg.com for it
    cdn = tmp_path / "cdn.html"
    cdn.write_text(
        page.replace(
            "<head>", '<head><script crossorigin src="https://unpkg.com/circuitsvis/dist/cdn/iife.js"></script>', 1
        ),
        encoding="utf-8",
    )
    assert _render(cdn, tmp_path).requests == ["https://unpkg.com/circuitsvis/dist/cdn/iife.js"]
