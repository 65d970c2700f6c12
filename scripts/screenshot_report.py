"""Screenshot an HTML report in headless Chromium at several page widths, full page height.

    python scripts/screenshot_report.py results/atlas-smollm2-135m/report.html docs \
        --widths 1280,800 --prefix atlas      # -> docs/atlas-1280.png, docs/atlas-800.png

A real browser lays the page out (fonts, wrapping, scrolling tables, image
scaling, circuitsvis' React views), which HTML parsing cannot check. Two runs
per width: the first measures the page height after layout (a small script
in a temporary copy of the page writes it into the DOM, read back with
``--dump-dom``), the second captures a window that tall. A PNG above
``--max-mb`` is reduced to a 256-colour palette (with Pillow, if installed).
The page is opened offline (every host name resolves to nothing) and
:func:`render` reads, from Chromium's NetLog, what the page asked the network
for: a self-contained report asks for nothing (a warning names what it did).
Needs ``chromium`` (Debian: ``apt-get install chromium``) or
``chromium-browser`` / ``google-chrome`` on PATH, or ``--chromium PATH``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Rendered", "find_chromium", "network_requests", "page_height", "render", "screenshot", "shoot"]

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
    """``chromium`` headless on ``args``, offline: no host name resolves (a page's remote load fails, and shows in
    the NetLog), and the browser's own background traffic is turned off where a switch allows."""
    cmd = [
        chromium,
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--no-first-run",
        "--no-default-browser-check",
        "--mute-audio",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={profile}",
        "--force-device-scale-factor=1",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


WEB_SCHEMES = ("http:", "https:", "ws:", "wss:")


def network_requests(net_log: Path) -> list[str]:
    """The http(s) and ws(s) URLs a page asked for, in order, from a Chromium NetLog (``--log-net-log``): each
    URL request started on behalf of a page (its ``initiator`` an origin: ``null`` for a ``file://`` page). The
    browser's own requests (clock sync, accounts, spelling dictionaries: ``initiator`` "not an origin") are not
    the page's; ``file:`` and ``data:`` URLs never reach the network."""
    text = Path(net_log).read_text(encoding="utf-8", errors="replace")
    try:
        log = json.loads(text)
    except json.JSONDecodeError:  # a browser stopped before closing the log leaves its event list open
        log = json.loads(text.rstrip().rstrip(",") + "]}")
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    urls: list[str] = []
    for event in log.get("events", []):
        params = event.get("params") or {}
        url = str(params.get("url", ""))
        if (
            event.get("type") == start
            and url.lower().startswith(WEB_SCHEMES)
            and params.get("initiator") != "not an origin"
            and url not in urls
        ):
            urls.append(url)
    return urls


@dataclass
class Rendered:
    """A page as Chromium showed it: ``dom``, the DOM after its scripts ran (``--dump-dom``); ``requests``, what it
    asked the network for (:func:`network_requests`); ``png``, the screenshot if one was asked for."""

    dom: str
    requests: list[str]
    png: Path | None = None


def render(
    chromium: str,
    html_path: Path,
    *,
    profile: Path,
    width: int = 1280,
    height: int = 2000,
    png: Path | None = None,
    timeout: float = 120,
    wait_ms: int = 4000,
) -> Rendered:
    """Open ``html_path`` once in a ``width`` x ``height`` window: its DOM after ``wait_ms`` of (virtual) time,
    the URLs it asked the network for, and a screenshot into ``png`` if given."""
    html_path = Path(html_path).resolve()
    if png is not None:
        png = Path(png).resolve()
        png.parent.mkdir(parents=True, exist_ok=True)
        png.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "netlog.json"
        args = [
            f"--window-size={width},{height}",
            f"--virtual-time-budget={wait_ms}",
            f"--log-net-log={log}",
            "--net-log-capture-mode=Default",
            "--dump-dom",
            *([f"--screenshot={png}"] if png else []),
            html_path.as_uri(),
        ]
        res = _run(chromium, args, profile, timeout)
        if res.returncode != 0 or not log.exists() or "<html" not in res.stdout.lower():
            raise RuntimeError(f"chromium could not render {html_path} (exit {res.returncode}): {res.stderr[-500:]}")
        requests = network_requests(log)
    if png is not None and (not png.exists() or png.stat().st_size == 0):
        raise RuntimeError(f"chromium wrote no screenshot of {html_path}: {res.stderr[-500:]}")
    return Rendered(res.stdout, requests, png)


def page_height(
    chromium: str, html_path: Path, width: int, *, profile: Path, timeout: float = 120, wait_ms: int = 4000
) -> tuple[int, int, list[str]]:
    """``(height, scroll width, network requests)``: the page's size in CSS px laid out in a window ``width`` px
    wide, and the URLs it asked the network for (:func:`render`)."""
    page = html_path.read_text(encoding="utf-8")
    marked = page.replace("</body>", _MEASURE + "</body>") if "</body>" in page else page + _MEASURE
    with tempfile.TemporaryDirectory() as tmp:
        tmp_page = Path(tmp) / html_path.name
        tmp_page.write_text(marked, encoding="utf-8")
        shown = render(chromium, tmp_page, profile=profile, width=width, height=1000, timeout=timeout, wait_ms=wait_ms)
    m = re.search(r'data-shot="(\d+)x(\d+)"', shown.dom)
    if not m:
        raise RuntimeError(f"could not measure the page height of {html_path}")
    return int(m.group(1)), int(m.group(2)), shown.requests


def screenshot(
    chromium: str,
    html_path: Path,
    out: Path,
    width: int,
    height: int,
    *,
    profile: Path,
    timeout: float = 180,
    wait_ms: int = 4000,
) -> Path:
    """Capture ``html_path`` in a ``width`` x ``height`` window into the PNG ``out``."""
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        out.unlink()
    res = _run(
        chromium,
        [
            f"--window-size={width},{height}",
            f"--virtual-time-budget={wait_ms}",
            f"--screenshot={out}",
            html_path.resolve().as_uri(),
        ],
        profile,
        timeout,
    )
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
        print(
            f"warning: {path} is {path.stat().st_size / 2**20:.1f} MB and Pillow is not installed to shrink it",
            file=sys.stderr,
        )
        return
    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    small.save(path, optimize=True)


def shoot(
    report: Path,
    out_dir: Path,
    widths: list[int],
    *,
    prefix: str | None = None,
    chromium: str | None = None,
    max_height: int = 30000,
    max_mb: float = 2.0,
) -> list[Path]:
    """One full-height PNG of ``report`` per width in ``out_dir``, named ``{prefix}-{width}.png``."""
    browser = find_chromium(chromium)
    if browser is None:
        raise FileNotFoundError(
            f"no Chromium found (tried {', '.join(BROWSERS)}); install it, e.g. "
            "apt-get install chromium, or pass --chromium PATH"
        )
    report = Path(report)
    if not report.is_file():
        raise FileNotFoundError(f"no report at {report}")
    prefix = prefix or report.stem
    paths = []
    with tempfile.TemporaryDirectory() as profile:
        for width in widths:
            height, scroll_width, requests = page_height(browser, report, width, profile=Path(profile))
            if requests:
                print(
                    f"warning: the page asks the network for {len(requests)} URL(s) (not shown offline): "
                    + ", ".join(requests[:5]),
                    file=sys.stderr,
                )
            if scroll_width > width:
                print(
                    f"warning: at {width} px the page is {scroll_width} px wide (content runs off the page)",
                    file=sys.stderr,
                )
            path = screenshot(
                browser,
                report,
                Path(out_dir) / f"{prefix}-{width}.png",
                width,
                min(height, max_height),
                profile=Path(profile),
            )
            _shrink(path, max_mb)
            print(
                f"{path}: {width} x {min(height, max_height)} px, {path.stat().st_size / 2**20:.2f} MB"
                + (f" (page {height} px, cut at {max_height})" if height > max_height else "")
            )
            paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("report", type=Path, help="the HTML report (e.g. results/atlas-smollm2-135m/report.html)")
    p.add_argument("out_dir", type=Path, help="folder for the PNGs")
    p.add_argument("--widths", default="1280,800", help="comma-separated window widths in px (default 1280,800)")
    p.add_argument("--prefix", default=None, help="PNG name prefix (default: the report's file stem)")
    p.add_argument(
        "--chromium", default=None, help="browser executable (default: first of %s on PATH)" % ", ".join(BROWSERS)
    )
    p.add_argument("--max-height", type=int, default=30000, help="cut pages taller than this (px)")
    p.add_argument("--max-mb", type=float, default=2.0, help="quantize PNGs larger than this (MB)")
    args = p.parse_args(argv)
    widths = [int(w) for w in args.widths.split(",") if w.strip()]
    if not widths or any(w < 200 for w in widths):
        p.error(f"--widths must be widths of at least 200 px, got {args.widths!r}")
    try:
        shoot(
            args.report,
            args.out_dir,
            widths,
            prefix=args.prefix,
            chromium=args.chromium,
            max_height=args.max_height,
            max_mb=args.max_mb,
        )
    except (FileNotFoundError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
