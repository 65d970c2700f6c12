"""Direction-vs-magnitude probes on UD EWT words, on a tiny model."""

from __future__ import annotations

import numpy as np
import pytest

from tlgeo.dirmag.plots import plot_probes
from tlgeo.dirmag.probes import default_probe_layers, direction_magnitude_probes, word_states
from tlgeo.evals.treebank import load_treebank


@pytest.fixture(scope="module")
def treebank():
    return load_treebank("dev", 12), load_treebank("test", 12)


def test_word_states_are_the_residual_at_each_words_first_token(llama, treebank):
    dev, _ = treebank
    ws = word_states(llama, dev[:3], [0, 1])
    assert ws.states[0].shape == (len(ws.upos), llama.cfg.d_model) and ws.states[0].dtype == np.float32
    _, cache = llama.run_with_cache(llama.to_tokens(dev[0].text), names_filter="blocks.1.hook_resid_post")
    from tlgeo.evals.treebank import first_subtokens

    pos = first_subtokens(llama, dev[0], max_tokens=128)
    want = cache["blocks.1.hook_resid_post"][0, pos[0]].numpy()
    np.testing.assert_allclose(ws.states[1][0], want, rtol=1e-5, atol=1e-6)  # batching and padding change nothing
    assert list(ws.upos[: len(dev[0].upos)]) == list(dev[0].upos)
    assert ws.sentence.max() == 2 and ws.n_sentences == 3


def test_probe_table(llama, treebank):
    dev, test = treebank
    df = direction_magnitude_probes(llama, dev, test, [0, 1], n_boot=50)
    assert len(df) == 2 * 2 * 3  # layers x tasks x feature sets
    assert set(df["metric"]) == {"accuracy", "r2"}
    up = df[df.task == "upos"]
    assert ((up.ci_low <= up.score) & (up.score <= up.ci_high)).all()
    assert (df.loc[df.task == "upos", "baseline"] > 5).all()  # the majority tag, in %
    fig = plot_probes(df)
    assert len(fig.axes) == 2


def test_default_layers():
    assert default_probe_layers(4) == [0, 1, 2, 3]
    assert default_probe_layers(30) == [0, 3, 6, 10, 13, 16, 19, 23, 26, 29]


def test_bad_probe_input_fails_clearly(llama, treebank):
    dev, test = treebank
    with pytest.raises(ValueError, match="out of range"):
        direction_magnitude_probes(llama, dev, test, [99])
    with pytest.raises(ValueError, match="no treebank sentences"):
        direction_magnitude_probes(llama, [], test, [0])
    with pytest.raises(ValueError, match="unknown probe task 'ner'"):
        direction_magnitude_probes(llama, dev, test, [0], tasks=("ner",))
