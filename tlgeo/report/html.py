"""A self-contained HTML report: tables, matplotlib figures and circuitsvis views.

Figures are embedded as base64 PNG; circuitsvis' JavaScript bundle is inlined
once in the page head (not fetched from a CDN), so the file works offline and
can be mailed around as one file.
"""

from __future__ import annotations

import base64
import html
import io
import re
from pathlib import Path

import pandas as pd

__all__ = ["Report"]

_CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{border-bottom:2px solid #444}h2{margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;font-size:0.85em;margin:0.5em 0}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#f3f3f3}
figure{margin:1em 0}figcaption{font-size:0.85em;color:#555}
.note{background:#f8f8f0;border-left:3px solid #cc9;padding:0.4em 0.8em}
"""


def _circuitsvis_bundle() -> str:
    from circuitsvis.utils import render as cv_render

    path = Path(cv_render.__file__).parent.parent / "dist" / "cdn" / "iife.js"
    return path.read_text(encoding="utf-8").replace("</script>", "")


class Report:
    """Build an HTML report section by section; :meth:`save` writes one file."""

    def __init__(self, title: str):
        self.title = title
        self.parts: list[str] = []
        self._uses_circuitsvis = False

    def section(self, title: str, text: str | None = None) -> "Report":
        self.parts.append(f"<h2>{html.escape(title)}</h2>")
        if text:
            self.text(text)
        return self

    def text(self, text: str, note: bool = False) -> "Report":
        cls = ' class="note"' if note else ""
        self.parts.append(f"<p{cls}>{html.escape(text)}</p>")
        return self

    def table(self, df: pd.DataFrame, caption: str | None = None, digits: int = 4) -> "Report":
        body = df.to_html(index=False, float_format=lambda v: f"{v:.{digits}g}", border=0)
        cap = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
        self.parts.append(f"<figure>{body}{cap}</figure>")
        return self

    def figure(self, fig, caption: str | None = None, dpi: int = 110) -> "Report":
        """Embed a matplotlib figure as PNG (the figure is closed afterwards)."""
        import matplotlib.pyplot as plt

        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
        plt.close(fig)
        b64 = base64.b64encode(buf.getvalue()).decode()
        cap = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
        self.parts.append(f'<figure><img alt="{html.escape(caption or "")}" src="data:image/png;base64,{b64}"/>{cap}</figure>')
        return self

    def circuitsvis(self, rendered, caption: str | None = None) -> "Report":
        """Embed a circuitsvis ``RenderedHTML`` without its copy of the JS bundle."""
        src = rendered.local_src
        # keep the div and the render call, drop the inlined bundle (added once, in <head>)
        call = src.rfind("CircuitsVis.render(")
        end = src.rfind("</script>")
        div = re.match(r'\s*<div id="([^"]+)"', src)
        if call < 0 or end < call or not div:
            raise ValueError("unexpected circuitsvis output; cannot embed it offline")
        cap = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
        self.parts.append(
            f'<figure><div id="{div.group(1)}" style="margin: 15px 0;"></div>'
            f"<script>{src[call:end]}</script>{cap}</figure>"
        )
        self._uses_circuitsvis = True
        return self

    def html(self) -> str:
        head = f"<meta charset='utf-8'><title>{html.escape(self.title)}</title><style>{_CSS}</style>"
        if self._uses_circuitsvis:
            head += f"<script>{_circuitsvis_bundle()}</script>"
        body = f"<h1>{html.escape(self.title)}</h1>" + "\n".join(self.parts)
        return f"<!DOCTYPE html><html><head>{head}</head><body>{body}</body></html>"

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(self.html(), encoding="utf-8")
        tmp.replace(path)
        return path
