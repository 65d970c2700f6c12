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


def test_table_has_no_index_column_and_scrolls():
    r = Report("t")
    wide = (
        pd.DataFrame({"site": ["a", "a", "b", "b"], "layer": [0, 1, 0, 1], "v": [0.1234, 0.2, 3.0, 4.5]})
        .pivot(index="layer", columns="site", values="v")
        .reset_index()
    )  # columns.name "site": to_html adds an empty column
    assert wide.columns.name == "site"
    r.table(wide, "wide")
    named = pd.DataFrame({"x": [1.5, 2.5]}, index=pd.Index(["p", "q"], name="cond"))  # a meaningful index: kept
    r.table(named)
    r.table(pd.DataFrame({"x": [1.0, 2.0]}, index=[5, 9]))  # an unnamed, non-default index: dropped
    out = r.html()
    tables = re.findall(r"<table>.*?</table>", out, flags=re.S)
    assert len(tables) == 3
    heads = [re.findall(r"<th[^>]*>([^<]*)</th>", t) for t in tables]
    assert heads == [["layer", "a", "b"], ["cond", "x"], ["x"]]
    assert "<th></th>" not in out and ">index<" not in out
    for t in tables:  # every row has as many cells as the header
        for row in re.findall(r"<tr>(.*?)</tr>", t.split("<tbody>")[1]):
            assert row.count("<td") == len(re.findall(r"<th[ >]", t.split("<tbody>")[0]))
    assert out.count('<div class="scroll">') == 3 and ".scroll{overflow-x:auto" in out
    assert out.index("<figcaption>wide</figcaption>") < out.index("<table>")  # caption above the table


def test_numbers_rounded_for_reading():
    from tlgeo.report.html import format_column

    assert format_column([28.0009, 78.11, 193.24]) == ["28.0", "78.1", "193.2"]
    assert format_column([0.0, 0.5]) == ["0.0", "0.5"]  # never more decimals than the values need
    assert format_column([20.0, 3.0]) == ["20", "3"]
    assert format_column([2699.3, 8.22e8, 28.5]) == ["2699", "8.2e8", "28"]
    assert format_column([1.27e-7, 2.4e-6, 0.0]) == ["1.3e-7", "2.4e-6", "0"]
    assert format_column([float("nan"), -0.0001, 0.25]) == ["—", "-1.0e-4", "0.25"]
    assert format_column([-0.0004, 0.5], digits=2) == ["-4e-4", "0.5"]
    r = Report("t", digits=3)
    r.table(pd.DataFrame({"ppl": [12.345678], "n": [20], "paper": ["61.61"], "name": ["x"]}))
    row = re.search(r"<tbody><tr>(.*?)</tr>", r.html()).group(1)
    assert re.findall(r"<td[^>]*>([^<]*)</td>", row) == ["12.3", "20", "61.61", "x"]
    assert '<td class="text">x</td>' in row and "<td>61.61</td>" in row  # numbers given as text align right


def test_headline_opens_the_report_and_is_replaced():
    r = Report("t")
    r.section("1. first").text("body")
    r.headline(["one so far."], ["budget tiny: indication only"])
    r.headline(["one.", "two <b>."], ["few items: indication only"])
    out = r.html()
    assert out.count('class="headline"') == 1 and "one so far" not in out
    assert out.index('class="headline"') < out.index("1. first")
    assert "two &lt;b&gt;." in out and 'class="warn"' in out and "few items: indication only" in out
    assert 'class="headline"' not in Report("t").headline([]).html()


def test_a_saved_view_works_offline(tmp_path):
    from tlgeo.report.html import save_view

    view = cv.tokens.colored_tokens(["The", " cat"], [0.2, 0.9])
    assert "https://unpkg.com" in str(view)  # what a plain save would write
    text = save_view(view, tmp_path / "v" / "tokens.html").read_text()
    assert "CircuitsVis" in text and "ColoredTokens" in text and " cat" in text
    assert not re.search(r"""(src|from)\s*=?\s*["']https?://""", text)  # no script from the network
