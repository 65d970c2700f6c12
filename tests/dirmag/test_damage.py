"""LM damage under L2-matched perturbations, on tiny models and the notebook's sentence set."""

import pytest
import torch

import tlgeo.dirmag.engine as eng
from tlgeo.dirmag.damage import damage_table, lm_damage, wikitext_sentences
from tlgeo.dirmag.engine import PAPER_DELTAS, SweepGrid, delta_grid
from tlgeo.dirmag.engine import sentence_batches, sentence_nll
from tlgeo.hooks.perturbation import Perturbation


def test_the_notebooks_sentence_set():
    s = wikitext_sentences()
    assert len(s) == 281  # the notebook's count on WikiText-103 test: the same articles
    assert s[0].startswith("Du Fu 's mother died shortly after he was born")
    assert all(30 < len(t) < 300 and "." in t and not t.startswith("=") for t in s)
    assert wikitext_sentences(5) == s[:5]


def test_resumed_perturbed_runs_equal_full_forwards(llama, sentences):
    df = lm_damage(
        llama,
        sentences,
        SweepGrid(deltas=[0.0, 0.05], kinds=["magnitude", "angle"], seeds=2, layers=(1, 2)),
        batch_size=4,
    )
    assert len(df) == 2 * 2 * 2 and set(df["seed"]) == {42, 43}
    zero = df[df["delta"] == 0.0]
    assert (zero["damage"].abs() < 1e-5).all()  # delta 0: no damage (resumed vs full clean forward: rounding)
    # one row by hand: full forwards with the same hooks, no prefix reuse
    row = df[(df["kind"] == "angle") & (df["delta"] == 0.05) & (df["seed"] == 43)].iloc[0]
    losses, start = [], 0
    with torch.inference_mode():
        for toks, l in sentence_batches(llama, sentences, batch_size=4):  # each batch its own draw
            pert = Perturbation("angle", 0.05, seed=43, layers=(1, 2), draw=start + 1)
            start += len(toks)
            losses.append(sentence_nll(llama.run_with_hooks(toks, fwd_hooks=pert.hooks(llama)), toks, l))
    assert row["loss"] == pytest.approx(float(torch.cat(losses).mean()), abs=1e-5)
    assert row["damage"] != 0 and row["n_sentences"] == 6 and row["delta_over_norm"] > 0


def test_bigger_perturbations_do_more_damage_and_the_table_pairs_the_kinds(llama, sentences):
    df = lm_damage(llama, sentences, SweepGrid(deltas=[0.02, 0.2], seeds=2), batch_size=3)
    t = damage_table(df).set_index("delta")
    for kind in ("magnitude", "angle"):  # a random tiny model: a scaled state may lower the loss a little
        assert abs(t.loc[0.2, f"{kind}_damage"]) > abs(t.loc[0.02, f"{kind}_damage"])
    ratio = t["angle_damage"] / (t["magnitude_damage"] + 1e-8)
    torch.testing.assert_close(torch.tensor(t["ratio_angle_over_magnitude"].values), torch.tensor(ratio.values))
    assert (t["n_seeds"] == 2).all() and t["paper_angle"].isna().all()  # no paper value at these deltas


def test_relative_and_faithful_modes(llama, sentences):
    rel = lm_damage(llama, sentences[:3], SweepGrid(deltas=[0.5], kinds=["magnitude"], seeds=1, relative=True))
    assert rel["delta_over_norm"].iloc[0] == 0.5 and rel["damage"].iloc[0] != 0
    faithful = lm_damage(llama, sentences[:3], SweepGrid(deltas=[0.05], kinds=["angle"], seeds=1, mode="faithful"))
    assert faithful["mode"].iloc[0] == "faithful" and faithful["damage"].iloc[0] != 0


def test_a_rerun_reads_the_log(llama, tmp_path, monkeypatch, sentences):
    log = tmp_path / "damage.jsonl"
    kw = dict(batch_size=4, log_path=log)
    first = lm_damage(llama, sentences, SweepGrid(deltas=[0.05], seeds=2), **kw)
    assert len(log.read_text().splitlines()) == 4

    def boom(*a, **k):
        raise AssertionError("recomputed")

    monkeypatch.setattr(eng, "perturbed_scores", boom)
    again = lm_damage(llama, sentences, SweepGrid(deltas=[0.05], seeds=2), **kw)
    assert again[["kind", "seed", "loss"]].equals(first[["kind", "seed", "loss"]])


def test_default_grid_reaches_the_norm():
    grid = delta_grid(170.0)  # SmolLM2's middle-layer median norm
    assert set(PAPER_DELTAS) <= set(grid) and max(grid) == 170.0 and 42.5 in grid


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(kinds=["size"]), ValueError, "unknown perturbation kind"),
        (dict(seeds=0), ValueError, "seeds must be a positive integer"),
        (dict(flip="mirror"), ValueError, "unknown flip"),
        (dict(deltas=[-1.0]), ValueError, "delta must be"),
        (dict(deltas=[]), ValueError, "empty delta grid"),
        (dict(layers=(9,)), IndexError, "out of range"),
        (dict(mode="rough"), ValueError, "unknown perturbation mode"),
    ],
)
def test_bad_input(llama, kwargs, exc, match, sentences):
    with pytest.raises(exc, match=match):
        lm_damage(llama, sentences, SweepGrid(**kwargs))
    with pytest.raises(ValueError, match="no sentences"):
        lm_damage(llama, [])


def test_the_benchmark_script_runs(capsys):
    """scripts/bench_dirmag.py on a tiny model: it prints a ratio per round and their median."""
    from ..scripts import load_script

    load_script("bench_dirmag").main(
        [
            "--model",
            "tiny:llama",
            "--sentences",
            "4",
            "--deltas",
            "0.05",
            "--seeds",
            "1",
            "--rounds",
            "1",
            "--batch-size",
            "2",
            "--blimp-pairs",
            "1",
        ]
    )
    out = capsys.readouterr().out
    assert "round 1 loss:" in out and "round 1 blimp:" in out
    for part in ("loss", "blimp", "all"):
        assert f"median ratio {part}:" in out


def test_token_damage_matches_the_sentence_loss_and_renders(llama, sentences):
    from tlgeo.dirmag.damage import token_damage
    from tlgeo.dirmag.plots import token_damage_view

    text = sentences[1]
    perts = [Perturbation("magnitude", 0.5), Perturbation("angle", 0.5)]
    t = token_damage(llama, text, perts)
    assert list(t.columns) == ["position", "token", "clean_nll", "magnitude_change", "angle_change"]
    ((toks, lengths),) = sentence_batches(llama, [text])
    with torch.no_grad():
        clean = float(sentence_nll(llama(toks), toks, lengths)[0])
    assert t["clean_nll"].mean() == pytest.approx(clean, rel=1e-5)
    assert t["angle_change"].abs().sum() > 0
    zero = token_damage(llama, text, [Perturbation("angle", 0.0)])
    assert (zero["angle_change"] == 0).all()  # delta 0 is the identity
    html = str(token_damage_view(t, "angle"))
    assert "ColoredTokens" in html
    with pytest.raises(ValueError, match="no 'flip_change' column"):
        token_damage_view(t, "flip")


def test_held_out_corpus_sentences():
    from tlgeo.data import load_text
    from tlgeo.dirmag.damage import corpus_sentences

    s = corpus_sentences("mobydick")
    text = " ".join(load_text("mobydick").split())
    cut = int(len(" ".join(load_text("mobydick")[: int(len(load_text("mobydick")) * 0.99)].split())))
    assert s and all(30 < len(t) < 300 for t in s)
    assert all(text.rfind(t) >= cut - 300 for t in s)  # from the held-out tail only
    assert len(corpus_sentences("mobydick", tail_frac=0.05)) > len(s)
    with pytest.raises(ValueError, match="tail_frac"):
        corpus_sentences("mobydick", tail_frac=0)


def test_the_summary_is_the_table_of_each_run_kept_apart():
    import pandas as pd

    from tlgeo.dirmag.damage import damage_summary

    rows = [
        {
            "model": "m",
            "kind": k,
            "delta": d,
            "seed": s,
            "relative": False,
            "mode": "exact",
            "flip": "allow",
            "layers": [1, 2],
            "n_sentences": n,
            "max_tokens": 64,
            "text_sha1": "x",
            "damage": dmg,
            "delta_over_norm": d / 10,
        }
        for n in (5, 9)
        for d in (1.0, 2.0)
        for k in ("magnitude", "angle")
        for s, dmg in ((42, 0.1 * n), (43, 0.3 * n))
    ]
    got = damage_summary(pd.DataFrame(rows))
    assert len(got) == 4 and list(got.columns[:2]) == ["model", "relative"]
    nine = got[(got["n_sentences"] == 9) & (got["delta"] == 2.0)].iloc[0]
    assert nine["angle_damage"] == pytest.approx(1.8) and nine["magnitude_sd"] == pytest.approx(0.2 * 9 / 2**0.5)
    assert nine["ratio_angle_over_magnitude"] == pytest.approx(1.0, abs=1e-6) and nine["layers"] == "[1, 2]"
    assert damage_summary(pd.DataFrame(rows).iloc[:0]) is None
