"""The atlas report as a reader sees it: a headline computed from the CSVs at the top, tables
without index columns and with "indication only" where budgets are small, captions, and a
screenshot in headless Chromium (skipped where no Chromium is installed)."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import dataclasses

import pandas as pd
import pytest

from tlgeo.decomposition.atlas import DecompositionBudgets
from tlgeo.decomposition.summary import headline
from tlgeo.dirmag.atlas import headline as dirmag_headline
from tlgeo.circuits.atlas import headline as circuits_headline
from tlgeo.geometries.atlas import headline as geometries_headline
from tlgeo.patching.atlas import headline as patching_headline
from tlgeo.pdsf.atlas import headline as pdsf_headline
from tlgeo.tokenwise.atlas import headline as tokenwise_headline
from tlgeo.report.atlas import STEPS, run_atlas
from tlgeo.report.headline import without_paper

from ..scripts import load_script


ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "screenshot_report.py"


def test_every_step_shows_progress(atlas_run):
    _, stdout, stderr = atlas_run
    n = len(STEPS)
    for i, step in enumerate(STEPS, 1):
        assert re.search(rf"\[atlas\] step {i}/{n} {step} \(.*\): started \d\d:\d\d:\d\d, .* into the run", stdout)
        assert re.search(rf"\[atlas\] step {i}/{n} {step} done in .* at \d\d:\d\d:\d\d", stdout)
    assert f"[atlas] all {n} step(s) done in" in stdout
    for bar in (
        "profile",
        "sweep",
        "zero-shot conditions",
        "zero-shot unedited",
        "head sensitivity",
        "mlp carrier",
        "closed form",
        "audit",
        "perturbations",
    ):
        assert f"{bar}:" in stderr, bar  # a tqdm bar per step, nested bars for conditions > tasks


def _tables(html: str) -> list[str]:
    return re.findall(r"<figure class=\"table\">.*?</figure>", html, flags=re.S)


def test_report_opens_with_the_headline(atlas_dir):
    html = (atlas_dir / "report.html").read_text()
    top = html.index('class="headline"')
    assert top < html.index("1. How parallel") and top < html.index("Model tiny:llama")
    block = html[top : html.index("</section>", top)]
    items = [re.sub(r"</?strong>", "", x) for x in re.findall(r"<li>(.*?)</li>", block)]
    # one heading per analysis, its first sentence (the takeaway) in bold
    assert re.findall(r"<h3>(.*?)</h3>", block)[:2] == [
        "Directional decomposition (seed paper 000)",
        "Direction vs magnitude (seed paper 003)",
    ]
    assert block.count("<h3>") == block.count("<li><strong>") == 7
    h, dm, tw, pd_, pt, ge = (
        headline(atlas_dir),
        dirmag_headline(atlas_dir),
        tokenwise_headline(atlas_dir),
        pdsf_headline(atlas_dir),
        patching_headline(atlas_dir),
        geometries_headline(atlas_dir),
    )
    ci = circuits_headline(atlas_dir)
    assert len(ci.sentences) == 1 and "edges recover 80 %" in ci.sentences[0]  # circuits: the induction circuit
    assert 4 <= len(h.sentences) <= 8 and len(dm.sentences) == 2  # direction vs magnitude: damage, probes
    assert (
        len(tw.sentences) == 2 and len(pd_.sentences) == 3
    )  # tokenwise: geometry, Spearman; PDSF: geometry, single pass, rotations
    assert len(pt.sentences) == 3  # patching: the induction task's top head and its largest path; ioi not patched
    assert len(ge.sentences) == 1 and "relate most" in ge.sentences[0]  # four geometries: the strongest relation
    caveat = "tiny:llama is a tiny model with random weights: the report tests the machinery"
    got = [html_unescape(x) for x in items]
    assert got[0].startswith(caveat)  # read first, before any number
    every = (
        h.sentences
        + dm.sentences
        + tw.sentences
        + pd_.sentences
        + pt.sentences
        + ci.sentences
        + ge.sentences
        + h.warnings
        + dm.warnings
        + tw.warnings
        + pd_.warnings
        + pt.warnings
        + ci.warnings
        + ge.warnings
    )
    assert got[1:] == [t for s in every if (t := without_paper(s))]  # random weights: no paper comparison
    # the tiny budgets (2 zero-shot items, 3 head texts, 128 tokens) are flagged
    assert any(w.startswith("Zero-shot: 2 items per task") and "indication only" in w for w in h.warnings)
    assert any(w.startswith("Head sensitivity: 3 texts") and "no head can pass" in w for w in h.warnings)
    heads = next(x for x in h.sentences if x.startswith("Heads:"))  # the headline agrees with its own warning
    assert " 0 of " in heads and "single-head removals change the loss at BH q < 0.05" in heads, heads
    assert any(w.startswith("Perplexity: 128 tokens") for w in h.warnings)


def html_unescape(s: str) -> str:
    import html

    return html.unescape(s)


def test_headline_is_computed_from_the_csvs(atlas_dir, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(atlas_dir, out)
    before = headline(out)
    cheapest = next(s for s in before.sentences if s.startswith("Cheapest parallel removal"))
    cmp = pd.read_csv(out / "compare.csv")
    row = cmp.index[cmp["condition"] == "attn s_par=0"][0]
    cmp.loc[row, "delta_ppl"] = -123.4  # attn becomes the cheapest, by a number no model gives
    cmp.to_csv(out / "compare.csv", index=False)
    after = headline(out)
    changed = next(s for s in after.sentences if s.startswith("Cheapest parallel removal"))
    assert changed != cheapest and "attn, ΔPPL −123" in changed
    audit = pd.read_csv(out / "audit.csv")
    audit.loc[audit["site"] == "value_excl_self", "perturbation_mean"] = 0.0123  # 1.23 %, below the residual edit
    audit.to_csv(out / "audit.csv", index=False)
    text = next(s for s in headline(out).sentences if s.startswith("Post-W_O audit"))
    assert "by 1.23 %" in text and "unlike the paper" in text
    zs = pd.read_csv(out / "compare_zeroshot.csv").assign(n=60)  # enough items: no zero-shot warning
    zs.to_csv(out / "compare_zeroshot.csv", index=False)
    assert not any(w.startswith("Zero-shot") for w in headline(out).warnings)
    for name in ("compare", "audit", "compare_zeroshot"):  # a step not run: its sentence is left out
        (out / f"{name}.csv").unlink()
    left = headline(out).sentences
    assert not any(s.startswith(("Cheapest", "Post-W_O")) for s in left) and left


def test_tables_are_readable(atlas_dir):
    html = (atlas_dir / "report.html").read_text()
    tables = _tables(html)
    assert len(tables) >= 12
    for t in tables:
        assert '<div class="scroll"><table>' in t  # wide tables scroll instead of running off the page
        assert "<figcaption>" in t and t.index("<figcaption>") < t.index("<table>")
        heads = re.findall(r"<th[^>]*>([^<]*)</th>", t)
        assert heads and all(h.strip() for h in heads), heads  # no empty (index) column
        assert not {"index", "level_0", "Unnamed: 0"} & set(heads), heads
        assert "e+" not in t  # no "1.2e+03" style numbers
    compare = next(t for t in tables if "paper zero-shot acc %" in t)
    assert "zero-shot acc % (indication only)" in compare  # 2 items per task: the table says so
    assert "61.61" in compare  # the paper's numbers as published
    audit = next(t for t in tables if "paper perturbation %" in t)
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", audit)
    pct = pd.read_csv(atlas_dir / "audit.csv").set_index("site")["perturbation_mean"] * 100
    assert f"{pct['attn']:.1f}" in cells  # in % like its caption, not a fraction
    assert "25.15" in cells and "49.10" in cells
    closed = next(t for t in tables if "expected" in t and "max_abs_err" in t)
    assert "exact only along z: expected to fail" in closed and "expected to fail" in closed.split("<table>")[0]


def test_captions_say_how_to_read(atlas_dir):
    html = (atlas_dir / "report.html").read_text()
    caps = re.findall(r"<figcaption>(.*?)</figcaption>", html, flags=re.S)
    assert all(len(c) > 40 for c in caps), [c for c in caps if len(c) <= 40]
    assert any("dashed line at 1" in c for c in caps) and any("white = 0" in c for c in caps)


def test_every_budget_is_named_after_its_chapter():
    """One name per concept: every atlas budget is ``<chapter>_<field>``, its flag ``--<chapter>-<field>``."""
    from tlgeo.report.registry import load_steps
    from tlgeo.runner.analysis import budget_fields

    load_steps()
    fields = budget_fields()
    assert {"decomposition_sweep_tokens", "dirmag_seeds", "patching_prompts"} <= set(fields)
    bad = {n: chap for n, (chap, f) in fields.items() if not n.startswith(chap + "_") or "flag" in f.metadata}
    assert not bad, f"budgets not named after their chapter: {bad}"


def test_every_costly_budget_has_a_cost():
    costly = {
        "decomposition_profile_tokens",
        "decomposition_sweep_tokens",
        "decomposition_s_par_grid",
        "decomposition_s_perp_grid",
        "decomposition_compare_sites",
        "decomposition_compare_scales",
        "decomposition_zeroshot_tasks",
        "decomposition_zeroshot_limit",
        "decomposition_ruler_tasks",
        "decomposition_ruler_lengths",
        "decomposition_ruler_samples",
        "decomposition_heads_texts",
        "decomposition_heads_length",
        "decomposition_heads_layers",
        "decomposition_mlp_carrier_tokens",
        "decomposition_closed_form_tokens",
    }
    fields = {f.name: f for f in dataclasses.fields(DecompositionBudgets)}
    assert costly <= set(fields)
    for name in costly:
        cost = fields[name].metadata.get("cost", "")  # what its cost grows with (no times: tests/test_cliargs.py)
        assert len(cost) > 10 and re.search(r"forward|pass|linear|per ", cost), name


@pytest.mark.skipif(
    load_script("screenshot_report").find_chromium() is None, reason="no Chromium on PATH (apt-get install chromium)"
)
def test_screenshot_in_headless_chromium(atlas_dir, tmp_path):
    import numpy as np
    from PIL import Image

    res = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            str(atlas_dir / "report.html"),
            str(tmp_path),
            "--widths",
            "1000,700",
            "--prefix",
            "atlas",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert "runs off the page" not in res.stderr  # nothing wider than the window
    assert "asks the network" not in res.stderr  # self-contained (tests/report/test_render_chromium.py)
    for width in (1000, 700):
        path = tmp_path / f"atlas-{width}.png"
        with Image.open(path) as im:
            img = np.asarray(im.convert("RGB")).astype(float)
        h, w, _ = img.shape
        assert w == width and h > 3000  # the full page, not one window
        assert img.std() > 20  # not blank: text, tables and figures
        dark = (img.mean(-1) < 100).mean()
        assert 0.005 < dark < 0.5, dark
        top = img[: min(h, 600)]
        assert (top.mean(-1) < 100).mean() > 0.002  # the title and the headline are at the top


def test_a_random_model_and_skipped_steps_are_said_first(tmp_path, llama):
    from tlgeo.report.atlas import AtlasConfig

    html = run_atlas(
        AtlasConfig(
            model="tiny:llama",
            out=tmp_path,
            steps=("profile",),
            budgets=dict(decomposition_context=64, decomposition_profile_tokens=64),
        ),
        model=llama,
    ).read_text()
    top = html[html.index('class="headline"') :]
    assert top.index("Read first") < top.index("random weights") < top.index("<ul>", top.index("</div>"))
    assert "Steps not run: sweeps, compare" in top


def test_a_ruler_step_that_did_not_run_says_so(atlas_dir):
    """The atlas runs no RULER task unless asked (one sample per condition decides nothing): the section and
    the headline say so, and the comparison table has no RULER column."""
    html = (atlas_dir / "report.html").read_text()
    assert "RULER was not run: the atlas runs no RULER task unless asked (--decomposition-ruler-tasks" in html
    assert "paper RULER %" not in html
    assert any(w.startswith("RULER-style: not run") for w in headline(atlas_dir).warnings)


def test_every_section_draws_from_its_saved_tables_without_a_model(atlas_dir):
    """A render gets no model (StepContext has none): each step's section drawn again from the tables the
    tiny atlas saved, attention views included (closed form, patching: computed by the run, kept in a table)."""
    from tlgeo.runner.analysis import StepContext
    from tlgeo.report.atlas import step_config
    from tlgeo.report.html import Report
    from tlgeo.report.registry import load_steps

    from .conftest import tiny_cfg

    cfg = tiny_cfg(atlas_dir)
    budgets = cfg.chapter_budgets()
    assert not hasattr(StepContext(cfg, Report("x"), None), "model")
    drawn = {}
    for name, step in load_steps().items():
        conf = step_config(step, cfg, budgets)
        if conf is None or not any((atlas_dir / f).exists() for f in step.files):
            continue
        report = Report(name)
        step.render(StepContext(cfg, report, budgets[step.chapter], conf), step.analysis.result.load(atlas_dir))
        drawn[name] = report.html()
    assert {"profile", "closed_form", "patching", "geometries", "tokenwise", "pdsf", "dirmag"} <= set(drawn)
    assert "h0 after" in drawn["closed_form"]  # the before/after attention view, from closed_form_attention.csv.gz
    assert "induction: clean attention of the heads with the largest" in drawn["patching"]
    assert "per token of the first window at block" in drawn["geometries"]  # the token view, from the table's text


def test_sections_are_numbered_by_the_atlas_from_the_registered_step_order(atlas_dir):
    """Renders write no numbers: each step's sections are N., Nb., Nc. ... with N its place among the registered
    steps (``load_steps``), so a section keeps its number in a partial run."""
    from tlgeo.report.registry import load_steps

    html = (atlas_dir / "report.html").read_text()
    heads = [h for h in re.findall(r"<h2>(.*?)</h2>", html) if re.match(r"\d+[a-z]?\. ", h)]
    steps = list(load_steps())
    assert heads[0].startswith("1. How parallel")
    assert f"{steps.index('dirmag') + 1}. Direction vs magnitude (seed paper 003): LM damage" in heads
    assert f"{steps.index('dirmag') + 1}b. Direction vs magnitude: subject–verb agreement" in heads
    assert f"{steps.index('geometries') + 1}. One token, four geometries" in [h.split(" (")[0] for h in heads] or any(
        h.startswith(f"{steps.index('geometries') + 1}. One token, four geometries") for h in heads
    )
    numbers = [int(re.match(r"\d+", h)[0]) for h in heads]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(steps)  # every step, in order, once
    assert f"under the perturbations of section {steps.index('dirmag') + 1}." in html
