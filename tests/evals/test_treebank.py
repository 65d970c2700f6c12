"""UD English EWT: depths from heads, the offline splits, and word -> first-token alignment."""

from __future__ import annotations

import pytest

from tlgeo.evals.treebank import TreebankSentence, first_subtokens, load_treebank, tree_depths


def test_tree_depths():
    # 1 <- 2 (root) -> 4 -> 3 ; 5 -> 4
    assert tree_depths([2, 0, 4, 2, 4]) == [1, 0, 2, 1, 2]
    assert tree_depths([0]) == [0]
    with pytest.raises(ValueError, match="cycle"):
        tree_depths([2, 1])
    with pytest.raises(ValueError, match="outside 0..2"):
        tree_depths([0, 7])


def test_offline_splits_are_ud_ewt():
    dev = load_treebank("dev", 5)
    assert len(dev) == 5 and dev[0].text == "From the AP comes this story :"
    s = dev[0]
    assert s.upos == ("ADP", "DET", "PROPN", "VERB", "DET", "NOUN", "PUNCT")
    assert s.depths == (2, 2, 1, 0, 2, 1, 1)  # the file's heads: 3 3 4 0 6 4 4
    assert all(len(x.words) == len(x.upos) == len(x.depths) for x in load_treebank("test", 50))
    with pytest.raises(ValueError, match="unknown treebank split 'train'"):
        load_treebank("train")
    with pytest.raises(ValueError, match="positive integer"):
        load_treebank("dev", 0)


def test_multiword_tokens_are_split_into_their_words(tmp_path):
    f = tmp_path / "mwt.conllu"
    f.write_text(
        "# sent_id = 1\n# text = I don't know\n"
        "1\tI\tI\tPRON\t_\t_\t4\tnsubj\t_\t_\n"
        "2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n"
        "2\tdo\tdo\tAUX\t_\t_\t4\taux\t_\t_\n"
        "3\tn't\tnot\tPART\t_\t_\t4\tadvmod\t_\t_\n"
        "4\tknow\tknow\tVERB\t_\t_\t0\troot\t_\t_\n\n"
    )
    (s,) = load_treebank(path=f)
    assert s.words == ("I", "do", "n't", "know") and s.depths == (1, 1, 1, 0)


def test_words_align_to_their_first_token(gpt2):
    s = TreebankSentence("x", "Hi, dear world", ("Hi", ",", "dear", "world"), ("INTJ",) * 4, (0, 1, 1, 1), (0, 1, 1, 1))
    pos = first_subtokens(gpt2, s)
    toks = gpt2.to_str_tokens(s.text)  # byte tokens, BOS first
    assert [toks[p] for p in pos] == ["H", ",", "d", "w"]  # the token of the word's first character
    assert pos == [1, 3, 5, 10]
    assert first_subtokens(gpt2, s, max_tokens=6) == [1, 3, 5, None]
    missing = TreebankSentence("y", "Hi there", ("Hi", "nowhere"), ("X", "X"), (0, 1), (0, 1))
    assert first_subtokens(gpt2, missing) == [1, None]
