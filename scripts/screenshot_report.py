"""Screenshot an HTML report in headless Chromium at several page widths, full page height.

    python scripts/screenshot_report.py results/atlas-smollm2-135m/report.html docs \
        --widths 1280,800 --prefix atlas      # -> docs/atlas-1280.png, docs/atlas-800.png

A real browser lays the page out (fonts, wrapping, scrolling tables, image
scaling, circuitsvis' React views), which HTML parsing cannot check. Two runs
per width: the first measures the page height after layout (a small script
in a temporary copy of the page writes it into the DOM, read back with
``--dump-dom``), the second captures a window that tall. A PNG above
``--max-mb`` is reduced to a 256-colour palette (with Pillow, if installed).
Needs ``chromium`` (Debian: ``apt-get install chromium``) or
``chromium-browser`` / ``google-chrome`` on PATH, or ``--chromium PATH``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["find_chromium", "page_height", "screenshot", "shoot", "render", "network_requests"]

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
_MEASURE = """<script>window.addEventListener("load", function () {
  setTimeout(function () {
    var h = Math.max(document.documentElement.scrollHeight, document.body.scrollHeight);
    var w = document.documentElement.scrollWidth;
    document.body.setAttribute("data-shot", h + "x" + w);
  }, 1500);
});</script>"""


def find_chromium(explicit: str | None = None) -> str | None:
    """The browser to use: ``explicit``, else the first of :data:`BROWSERS` on PATH."""
    if explicit:
        return explicit if shutil.which(explicit) or Path(explicit).exists() else None
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def _run(chromium: str, args: list[str], profile: Path, timeout: float) -> subprocess.CompletedProcess:
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-pings",
           "--hide-scrollbars", "--no-first-run", "--no-default-browser-check", "--mute-audio",
           f"--user-data-dir={profile}", "--force-device-scale-factor=1", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def page_height(chromium: str, html_path: Path, width: int, *, profile: Path, timeout: float = 120,
                wait_ms: int = 4000) -> tuple[int, int]:
    """``(height, scroll width)`` in CSS px of the page laid out in a window ``width`` px wide."""
    page = html_path.read_text(encoding="utf-8")
    marked = page.replace("</body>", _MEASURE + "</body>") if "</body>" in page else page + _MEASURE
    with tempfile.TemporaryDirectory() as tmp:
        tmp_page = Path(tmp) / html_path.name
        tmp_page.write_text(marked, encoding="utf-8")
        res = _run(chromium, [f"--window-size={width},1000", f"--virtual-time-budget={wait_ms}", "--dump-dom",
                              tmp_page.as_uri()], profile, timeout)
    m = re.search(r'data-shot="(\d+)x(\d+)"', res.stdout)
    if not m:
        raise RuntimeError(f"could not measure the page height of {html_path} (chromium exit {res.returncode}): "
                           f"{res.stderr[-500:]}")
    return int(m.group(1)), int(m.group(2))


_REQUESTS = """<script>performance.setResourceTimingBufferSize(100000);
window.addEventListener("load", function () {
  setTimeout(function () {
    var urls = performance.getEntriesByType("resource").map(function (e) { return e.name; });
    document.documentElement.setAttribute("data-requests", JSON.stringify(urls));
  }, 1500);
});</script>"""


def render(chromium: str, html_path: Path, width: int = 1280, *, profile: Path, timeout: float = 120,
           wait_ms: int = 4000) -> tuple[str, list[str]]:
    """``(DOM, requested URLs)`` of ``html_path`` laid out and run in a ``width`` px window: the DOM after its
    scripts ran (``--dump-dom``) and every resource the page asked for (its Resource Timing entries: images,
    scripts, styles, fonts, fetches; loads that failed included), read from a temporary copy beside the page
    (so its relative links resolve) with a small script first in its head."""
    page = html_path.read_text(encoding="utf-8")
    head = re.search(r"<head[^>]*>", page, flags=re.I)
    marked = (page[: head.end()] + _REQUESTS + page[head.end():]) if head else _REQUESTS + page
    tmp_page = html_path.with_name(f".render-{html_path.name}")
    try:
        tmp_page.write_text(marked, encoding="utf-8")
        res = _run(chromium, [f"--window-size={width},1000", f"--virtual-time-budget={wait_ms}", "--dump-dom",
                              tmp_page.resolve().as_uri()], profile, timeout)
    finally:
        tmp_page.unlink(missing_ok=True)
    m = re.search(r'data-requests="([^"]*)"', res.stdout)
    if not m:
        raise RuntimeError(f"{html_path}: chromium returned no DOM with the page's requests (exit {res.returncode}):"
                           f" {res.stderr[-500:]}")
    import html as _html
    import json

    return res.stdout, json.loads(_html.unescape(m.group(1)))


def network_requests(urls: list[str]) -> list[str]:
    """The URLs among ``urls`` that go to the network (http, https, ws, wss), not to a file or data URL."""
    return [u for u in urls if u.split(":", 1)[0].lower() in ("http", "https", "ws", "wss")]


def screenshot(chromium: str, html_path: Path, out: Path, width: int, height: int, *, profile: Path,
               timeout: float = 180, wait_ms: int = 4000) -> Path:
    """Capture ``html_path`` in a ``width`` x ``height`` window into the PNG ``out``."""
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        out.unlink()
    res = _run(chromium, [f"--window-size={width},{height}", f"--virtual-time-budget={wait_ms}",
                          f"--screenshot={out}", html_path.resolve().as_uri()], profile, timeout)
    if not out.exists() or out.stat().st_size == 0:
        raise RuntimeError(f"chromium wrote no screenshot (exit {res.returncode}): {res.stderr[-500:]}")
    return out


def _shrink(path: Path, max_mb: float) -> None:
    """Quantize a PNG above ``max_mb`` to a 256-colour palette (lossless enough for a report page)."""
    if path.stat().st_size <= max_mb * 2**20:
        return
    try:
        from PIL import Image
    except ImportError:
        print(f"warning: {path} is {path.stat().st_size / 2**20:.1f} MB and Pillow is not installed to shrink it",
              file=sys.stderr)
        return
    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    small.save(path, optimize=True)


def shoot(report: Path, out_dir: Path, widths: list[int], *, prefix: str | None = None,
          chromium: str | None = None, max_height: int = 30000, max_mb: float = 2.0) -> list[Path]:
    """One full-height PNG of ``report`` per width in ``out_dir``, named ``{prefix}-{width}.png``."""
    browser = find_chromium(chromium)
    if browser is None:
        raise FileNotFoundError(f"no Chromium found (tried {', '.join(BROWSERS)}); install it, e.g. "
                                "apt-get install chromium, or pass --chromium PATH")
    report = Path(report)
    if not report.is_file():
        raise FileNotFoundError(f"no report at {report}")
    prefix = prefix or report.stem
    paths = []
    with tempfile.TemporaryDirectory() as profile:
        for width in widths:
            height, scroll_width = page_height(browser, report, width, profile=Path(profile))
            if scroll_width > width:
                print(f"warning: at {width} px the page is {scroll_width} px wide (content runs off the page)",
                      file=sys.stderr)
            path = screenshot(browser, report, Path(out_dir) / f"{prefix}-{width}.png", width,
                              min(height, max_height), profile=Path(profile))
            _shrink(path, max_mb)
            print(f"{path}: {width} x {min(height, max_height)} px, {path.stat().st_size / 2**20:.2f} MB"
                  + (f" (page {height} px, cut at {max_height})" if height > max_height else ""))
            paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("report", type=Path, help="the HTML report (e.g. results/atlas-smollm2-135m/report.html)")
    p.add_argument("out_dir", type=Path, help="folder for the PNGs")
    p.add_argument("--widths", default="1280,800", help="comma-separated window widths in px (default 1280,800)")
    p.add_argument("--prefix", default=None, help="PNG name prefix (default: the report's file stem)")
    p.add_argument("--chromium", default=None, help="browser executable (default: first of %s on PATH)"
                   % ", ".join(BROWSERS))
    p.add_argument("--max-height", type=int, default=30000, help="cut pages taller than this (px)")
    p.add_argument("--max-mb", type=float, default=2.0, help="quantize PNGs larger than this (MB)")
    args = p.parse_args(argv)
    widths = [int(w) for w in args.widths.split(",") if w.strip()]
    if not widths or any(w < 200 for w in widths):
        p.error(f"--widths must be widths of at least 200 px, got {args.widths!r}")
    try:
        shoot(args.report, args.out_dir, widths, prefix=args.prefix, chromium=args.chromium,
              max_height=args.max_height, max_mb=args.max_mb)
    except (FileNotFoundError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
