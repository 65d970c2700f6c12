"""A self-contained HTML report: tables, matplotlib figures and circuitsvis views.

Figures are embedded as base64 PNG; circuitsvis' JavaScript bundle is inlined
once in the page head (not fetched from a CDN), so the file works offline and
can be mailed around as one file.

Tables are written for reading: no index column, numbers rounded per column to
a few significant digits (:func:`format_column`), a caption above, and a
wrapper that scrolls horizontally when a table is wider than the page. A
:meth:`Report.headline` block opens the report; it can be set or replaced at
any time (e.g. after every step of a long run).
"""

from __future__ import annotations

import base64
import html
import io
import math
import re
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from ..errors import InputError
from ..runner.results import IDENTITY
from ..storage import write_text

__all__ = ["Report", "format_column", "readable_frame", "save_view"]

_CSS = """
body{font-family:system-ui,sans-serif;font-size:16px;line-height:1.45;max-width:1100px;margin:2em auto;
padding:0 1em;color:#222}
h1{border-bottom:2px solid #444}h2{margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;font-size:0.85em;margin:0.3em 0}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:right;white-space:nowrap}
th{background:#f3f3f3;vertical-align:bottom;white-space:normal;min-width:2.5em}
td.text,th.text{text-align:left}
.scroll{overflow-x:auto;max-width:100%}
figure{margin:1.2em 0}figcaption{font-size:0.9em;color:#444;margin:0.3em 0;max-width:95ch}
img{max-width:100%;height:auto}
.note{background:#f8f8f0;border-left:3px solid #cc9;padding:0.4em 0.8em}
.headline{background:#f2f6fb;border-left:4px solid #4a7ab5;padding:0.2em 1em 0.6em;margin:1em 0}
.headline h2{margin-top:0.4em;border:0}.headline ul{padding-left:1.2em;margin:0.3em 0}
.warn{background:#fff4e0;border-left:4px solid #d98c00;padding:0.3em 1em;margin:0.5em 0}
.warn ul{padding-left:1.2em;margin:0.2em 0}
"""

_DASH = "—"
_NUMBER = re.compile(r"^(—|[-−+]?(\d[\d,]*\.?\d*|\.\d+)(e[-−+]?\d+)?\s?%?)$")


def _sci(v: float, digits: int) -> str:
    mant, exp = f"{v:.{max(digits - 1, 0)}e}".split("e")
    return f"{mant}e{int(exp)}"


def _nonfinite(v: float) -> str:
    return _DASH if math.isnan(v) else ("∞" if v > 0 else "−∞")


def format_column(values: Sequence, digits: int = 3) -> list[str]:
    """Strings for one column of numbers, rounded for reading.

    One number of decimals for the whole column, from its typical (median)
    magnitude, so that about ``digits`` significant digits show and the column
    lines up; never more decimals than the values need (``0.5``, not
    ``0.500``). Integers stay integers. Values of 1e5 and above, and non-zero
    values that would round to 0, are written in scientific notation
    (``8.2e8``, ``1.3e-7``), and so is a whole column of values below 1e-3;
    NaN is a dash.
    """
    arr = np.asarray(values, dtype=float)
    finite = arr[np.isfinite(arr)]
    if finite.size and np.all(finite == np.round(finite)) and np.all(np.abs(finite) < 1e5):
        return [_DASH if not math.isfinite(v) else f"{int(v)}" for v in arr]
    normal = np.abs(finite[(finite != 0) & (np.abs(finite) < 1e5)])
    typical = float(np.median(normal)) if normal.size else 1.0
    if typical < 1e-3:  # a column of tiny numbers (errors, p-values near 0): all scientific
        return [_nonfinite(v) if not math.isfinite(v) else ("0" if v == 0 else _sci(v, digits - 1)) for v in arr]
    dec = int(min(max(digits - 1 - math.floor(math.log10(typical)), 0), 6))
    shown = finite[(np.abs(finite) < 1e5) & ((finite == 0) | (np.abs(finite) >= 0.5 * 10.0**-dec))]
    for d in range(dec + 1):  # the fewest decimals that show every (non-scientific) value as it is
        if np.allclose(np.round(shown, d), shown, rtol=0, atol=1e-12 * max(1.0, float(np.abs(shown).max(initial=0)))):
            dec = d
            break
    out = []
    for v in arr:
        if not math.isfinite(v):
            out.append(_nonfinite(v))
        elif abs(v) >= 1e5 or (v != 0 and abs(v) < 0.5 * 10.0**-dec):
            out.append(_sci(v, digits - 1))
        else:
            s = f"{v:.{dec}f}"
            out.append(s[1:] if s.startswith("-") and float(s) == 0 else s)  # no "-0.00"
    return out


def readable_frame(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with a flat header and no index: a meaningful (named or non-default) index
    becomes columns, a plain 0..n-1 index is dropped, the columns' own name (which
    ``to_html`` prints as an empty index column) is removed, and MultiIndex columns
    are joined with spaces."""
    df = df.copy()
    idx = df.index
    plain = isinstance(idx, pd.RangeIndex) and idx.start == 0 and idx.step == 1 and idx.name is None
    if not plain and any(n is not None for n in idx.names):
        df = df.reset_index()
    else:
        df = df.reset_index(drop=True)
    if isinstance(df.columns, pd.MultiIndex):
        df.columns = [" ".join(str(x) for x in c if str(x) not in ("", "nan")).strip() for c in df.columns]
    df.columns = [str(c) for c in df.columns]
    df.columns.name = None
    return df


def _circuitsvis_bundle() -> str:
    from circuitsvis.utils import render as cv_render

    path = Path(cv_render.__file__).parent.parent / "dist" / "cdn" / "iife.js"
    return path.read_text(encoding="utf-8").replace("</script>", "")


def save_view(rendered, path: str | Path, title: str = "tlgeo view") -> Path:
    """Write a circuitsvis view (``RenderedHTML``) as one HTML file that works offline: its
    JavaScript inlined (``str(view)`` loads it from unpkg.com at every opening)."""
    return write_text(
        path,
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"</head><body>{rendered.local_src}</body></html>",
    )


class Report:
    """Build an HTML report section by section; :meth:`save` writes one file."""

    def __init__(self, title: str, digits: int = 4):
        """``digits``: the significant digits of table numbers unless a table sets its own."""
        self.title = title
        self.digits = digits
        self.parts: list[str] = []
        self._headline = ""
        self._uses_circuitsvis = False
        self._number: int | None = None  # the atlas step whose sections are drawn now (numbered)
        self._sections = 0

    def headline(
        self,
        sentences: Iterable[str],
        warnings: Iterable[str] = (),
        title: str = "Headline",
        caveats: Iterable[str] = (),
        groups: Iterable[tuple[str, Sequence[str]]] = (),
    ) -> "Report":
        """Set the block that opens the report, right under its title (a later call replaces it):
        ``caveats`` first (what the reader must know before any number: a model with random weights, steps
        not run), ``sentences`` as a list, then ``groups`` (a heading and its sentences, the first in bold:
        one takeaway per analysis), ``warnings`` (budgets too small to conclude from) below them."""
        sentences, warnings, caveats = list(sentences), list(warnings), list(caveats)
        groups = [(h, list(s)) for h, s in groups if s]
        if not sentences and not warnings and not caveats and not groups:
            self._headline = ""
            return self
        items = "".join(f"<li>{html.escape(x)}</li>" for x in sentences)
        block = f'<section class="headline"><h2>{html.escape(title)}</h2>'
        if caveats:
            block += (
                '<div class="warn"><strong>Read first</strong><ul>'
                + "".join(f"<li>{html.escape(c)}</li>" for c in caveats)
                + "</ul></div>"
            )
        if items:
            block += f"<ul>{items}</ul>"
        for heading, group in groups:
            block += (
                f"<h3>{html.escape(heading)}</h3><ul><li><strong>{html.escape(group[0])}</strong></li>"
                + "".join(f"<li>{html.escape(x)}</li>" for x in group[1:])
                + "</ul>"
            )
        if warnings:
            block += (
                '<div class="warn"><strong>Budgets too small to conclude from (indication only)</strong><ul>'
                + "".join(f"<li>{html.escape(w)}</li>" for w in warnings)
                + "</ul></div>"
            )
        self._headline = block + "</section>"
        return self

    def numbered(self, number: int | None) -> "Report":
        """Number the sections that follow ``number``. (the first), ``<number>b.``, ``<number>c.`` ...; ``None``:
        unnumbered. The atlas numbers each step's sections by the step's place in the registered order."""
        self._number, self._sections = number, 0
        return self

    def section(self, title: str, text: str | None = None) -> "Report":
        if self._number is not None:
            letter = "" if self._sections == 0 else chr(ord("a") + min(self._sections, 25))
            title = f"{self._number}{letter}. {title}"
            self._sections += 1
        self.parts.append(f"<h2>{html.escape(title)}</h2>")
        if text:
            self.text(text)
        return self

    def text(self, text: str, note: bool = False) -> "Report":
        cls = ' class="note"' if note else ""
        self.parts.append(f"<p{cls}>{html.escape(text)}</p>")
        return self

    def table(
        self, df: pd.DataFrame, caption: str | None = None, digits: int | None = None, by_row: bool = False
    ) -> "Report":
        """A table with its caption above: no index column (see :func:`readable_frame`), float
        columns rounded by :func:`format_column` to about ``digits`` (default: the report's)
        significant digits, identity columns (:data:`tlgeo.runner.results.IDENTITY`) with one value left to the report's
        header, in a wrapper that scrolls horizontally when the table is wider
        than the page. ``by_row``: round the numbers of each row together instead (a
        transposed table, one quantity per row)."""
        digits = self.digits if digits is None else digits
        df = readable_frame(df)
        df = df.drop(columns=[c for c in IDENTITY if c in df.columns and df[c].nunique() <= 1])  # in the header
        cells: list[list[str]] = []
        numeric: list[bool] = []
        if by_row:
            num = [
                c for c in df.columns if pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])
            ]
            rows_fmt = [format_column(df.loc[i, num].to_numpy(dtype=float), digits) for i in df.index]
            formatted = {c: [r[j] for r in rows_fmt] for j, c in enumerate(num)}
        for col in df.columns:
            if by_row and col in formatted:
                cells.append(formatted[col])
                numeric.append(True)
                continue
            s = df[col]
            if pd.api.types.is_bool_dtype(s):
                cells.append([str(v) for v in s])
                numeric.append(False)
            elif pd.api.types.is_numeric_dtype(s):
                cells.append(format_column(s.to_numpy(dtype=float), digits))
                numeric.append(True)
            else:
                col_cells = [
                    _DASH
                    if (v is None or (isinstance(v, float) and math.isnan(v)))
                    else (format_column([v], digits)[0] if isinstance(v, float) else str(v))
                    for v in s
                ]
                cells.append(col_cells)
                numeric.append(all(_NUMBER.match(c) for c in col_cells))  # numbers given as text align right
        cls = ["" if n else ' class="text"' for n in numeric]
        head = "".join(f"<th{c}>{html.escape(col)}</th>" for col, c in zip(df.columns, cls))
        rows = "".join(
            "<tr>" + "".join(f"<td{c}>{html.escape(col[i])}</td>" for col, c in zip(cells, cls)) + "</tr>"
            for i in range(len(df))
        )
        cap = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
        self.parts.append(
            f'<figure class="table">{cap}<div class="scroll"><table><thead><tr>{head}</tr></thead>'
            f"<tbody>{rows}</tbody></table></div></figure>"
        )
        return self

    def figure(self, fig, caption: str | None = None, dpi: int = 110) -> "Report":
        """Embed a matplotlib figure as PNG (the figure is closed afterwards). A figure with a layout
        engine (``layout="constrained"``) is saved as laid out; one without is cropped to what it draws
        (``bbox_inches="tight"`` costs a second drawing of the figure)."""
        import matplotlib.pyplot as plt

        buf = io.BytesIO()
        crop = {} if fig.get_layout_engine() is not None else {"bbox_inches": "tight"}
        fig.savefig(buf, format="png", dpi=dpi, **crop)
        plt.close(fig)
        b64 = base64.b64encode(buf.getvalue()).decode()
        cap = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
        self.parts.append(
            f'<figure><img alt="{html.escape(caption or "")}" src="data:image/png;base64,{b64}"/>{cap}</figure>'
        )
        return self

    def circuitsvis(self, rendered, caption: str | None = None) -> "Report":
        """Embed a circuitsvis ``RenderedHTML`` without its copy of the JS bundle (in a wrapper
        that scrolls when the view is wider than the page)."""
        src = rendered.local_src
        # keep the div and the render call, drop the inlined bundle (added once, in <head>)
        call = src.rfind("CircuitsVis.render(")
        end = src.rfind("</script>")
        div = re.match(r'\s*<div id="([^"]+)"', src)
        if call < 0 or end < call or not div:
            raise InputError("unexpected circuitsvis output; cannot embed it offline")
        cap = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
        self.parts.append(
            f'<figure><div class="scroll"><div id="{div.group(1)}" style="margin: 15px 0;"></div></div>'
            f"<script>{src[call:end]}</script>{cap}</figure>"
        )
        self._uses_circuitsvis = True
        return self

    def html(self) -> str:
        head = f"<meta charset='utf-8'><title>{html.escape(self.title)}</title><style>{_CSS}</style>"
        if self._uses_circuitsvis:
            head += f"<script>{_circuitsvis_bundle()}</script>"
        body = f"<h1>{html.escape(self.title)}</h1>" + self._headline + "\n".join(self.parts)
        return f"<!DOCTYPE html><html><head>{head}</head><body>{body}</body></html>"

    def save(self, path: str | Path) -> Path:
        return write_text(path, self.html())
