import base64
import re

import matplotlib

matplotlib.use("Agg")
import circuitsvis as cv
import matplotlib.pyplot as plt
import pandas as pd
import torch

from tlgeo.report.html import Report


def test_report_is_self_contained(tmp_path):
    r = Report("atlas <test>")
    r.section("numbers", "a & b").table(pd.DataFrame({"site": ["attn"], "ppl": [12.345678]}))
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    r.figure(fig, "a line")
    for _ in range(2):
        r.circuitsvis(cv.attention.attention_heads(tokens=["a", "b"], attention=torch.rand(2, 2, 2)), "heads")
    out = r.save(tmp_path / "r.html").read_text()
    assert "atlas &lt;test&gt;" in out and "a &amp; b" in out and "12.35" in out
    png = re.search(r'src="data:image/png;base64,([^"]+)"', out).group(1)
    assert base64.b64decode(png)[:8] == b"\x89PNG\r\n\x1a\n"
    # the JS bundle appears once, not once per figure, and nothing is fetched from a CDN
    assert out.count("var CircuitsVis=") == 1
    assert out.count("CircuitsVis.render(") == 2
    assert "unpkg.com" not in out and "https://" not in out.split("<body>")[1]
    # each figure's div id is the one its render call targets
    ids = re.findall(r'<div id="(circuits-vis-[^"]+)"', out)
    calls = re.findall(r'CircuitsVis\.render\(\s*"(circuits-vis-[^"]+)"', out)
    assert ids == calls and len(set(ids)) == 2
