"""Patching tasks: validation, the three metrics, and the four builders' prompt properties."""

import json
import re
from collections import defaultdict

import pytest
import torch

from tlgeo.data import data_dir
from tlgeo.models import byte_tokenizer
from tlgeo.patching.tasks import (
    CENTURIES,
    NAMES,
    ONE_PREFIX,
    TASKS,
    Task,
    TaskError,
    agreement_task,
    build_task,
    clean_accuracy,
    greater_than_task,
    induction_task,
    ioi_task,
    logit_diff,
    logprob,
    prob_diff,
)


class WordTokenizer:
    """A toy GPT-2-like tokenizer: words with their leading space, years as ``" 17"`` + ``"32"``
    (``" 1700"``, ``" 1800"``, ``" 1900"`` whole), ids given in order of first sight."""

    def __init__(self, pattern=r" 1[789]00| ?[A-Za-z']+| \d\d|\d\d|\d| ?[^\sA-Za-z\d]"):
        self.pattern = re.compile(pattern)
        self.pieces: list[str] = []
        self.ids: dict[str, int] = {}

    def encode(self, text, add_special_tokens=False):
        pieces = self.pattern.findall(text)
        assert "".join(pieces) == text, "the toy pattern must cover the text"
        return [self._id(p) for p in pieces]

    def _id(self, piece):
        if piece not in self.ids:
            self.ids[piece] = len(self.pieces)
            self.pieces.append(piece)
        return self.ids[piece]

    def decode(self, ids):
        return "".join(self.pieces[i] for i in ids)

    def __len__(self):
        return len(self.pieces)


def toy_task(**kw):
    base = dict(
        name="toy",
        clean=torch.tensor([[5, 1, 2, 3], [5, 2, 3, 4]]),
        corrupted=torch.tensor([[5, 4, 2, 3], [5, 1, 3, 4]]),
        correct=torch.tensor([[1, -1], [2, 3]]),
        wrong=torch.tensor([[0, 4], [4, -1]]),
        positions={"X": torch.tensor([1, 2])},
        prompts=("a", "b"),
    )
    return Task(**{**base, **kw})


# --- metrics -------------------------------------------------------------------------------------------


def test_the_metrics_match_a_direct_computation():
    logits = torch.tensor([[1.0, 2.0, -1.0, 0.5, 3.0], [0.0, -2.0, 4.0, 1.0, 1.5]])
    correct, wrong = torch.tensor([[1, -1], [2, 3]]), torch.tensor([[0, 4], [4, -1]])
    want = torch.tensor([2.0 - (1.0 + 3.0) / 2, (4.0 + 1.0) / 2 - 1.5])
    assert torch.allclose(logit_diff(logits, correct, wrong), want)
    p = logits.exp() / logits.exp().sum(1, keepdim=True)
    want = torch.stack([p[0, 1] - p[0, 0] - p[0, 4], p[1, 2] + p[1, 3] - p[1, 4]])
    assert torch.allclose(prob_diff(logits, correct, wrong), want)
    want = torch.stack([p[0, 1].log(), p[1, 2].log()])
    assert torch.allclose(logprob(logits, correct, wrong), want)
    for fn in (logit_diff, prob_diff, logprob):  # half-precision logits are scored in float32
        assert fn(logits.half(), correct, wrong).dtype == torch.float32
        assert torch.allclose(fn(logits.half(), correct, wrong), fn(logits.half().float(), correct, wrong))


def test_score_dispatches_and_is_differentiable_with_padding_left_out():
    logits = torch.randn(2, 6, generator=torch.Generator().manual_seed(0), requires_grad=True)
    for metric, fn in (("logit_diff", logit_diff), ("prob_diff", prob_diff), ("logprob", logprob)):
        task = toy_task(metric=metric)
        assert torch.equal(task.score(logits), fn(logits, task.correct, task.wrong))
    task = toy_task(
        clean=torch.tensor([[5, 1, 2, 3], [5, 2, 3, 4]]),
        correct=torch.tensor([[1, -1], [2, 3]]),
        wrong=torch.tensor([[4, -1], [4, -1]]),
    )
    task.score(logits).sum().backward()
    # the -1 padding gathers nothing: id 0 is in no answer, so its logit gets no gradient
    assert (logits.grad[:, 0] == 0).all() and (logits.grad[:, 5] == 0).all()
    assert logits.grad[0, 1] == 1.0 and logits.grad[1, 2] == 0.5 and logits.grad[0, 4] == -1.0
    with pytest.raises(ValueError, match=r"final position's logits \[n=2, vocab\]"):
        task.score(torch.zeros(2, 4, 6))


# --- validation -------------------------------------------------------------------------------------------


def test_end_is_added_and_ids_are_kept():
    task = toy_task()
    assert task.n == 2 and task.positions["end"].tolist() == [3, 3] and task.positions["X"].tolist() == [1, 2]
    assert task.clean.dtype == task.correct.dtype == torch.long
    with pytest.raises(ValueError, match="'end' must be pos - 1"):
        toy_task(positions={"end": torch.tensor([2, 3])})
    assert toy_task(positions={"end": torch.tensor([3, 3])}).positions["end"].tolist() == [3, 3]


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(clean=torch.tensor([[5.0, 1, 2, 3], [5, 2, 3, 4]])), "clean must be a 2-D integer tensor"),
        (dict(corrupted=torch.tensor([5, 4, 2, 3])), "corrupted must be a 2-D integer tensor"),
        (dict(corrupted=torch.tensor([[5, 4, 2], [5, 1, 3]])), r"aligned positions.*\(2, 4\).*\(2, 3\)"),
        (
            dict(
                clean=torch.zeros(0, 4, dtype=torch.long),
                corrupted=torch.zeros(0, 4, dtype=torch.long),
                correct=torch.zeros(0, 1, dtype=torch.long),
                wrong=torch.zeros(0, 1, dtype=torch.long),
                positions={},
                prompts=(),
            ),
            r"n == 0",
        ),
        (dict(correct=torch.tensor([1, 2])), r"correct must be an integer tensor \[n, k\]"),
        (dict(wrong=torch.tensor([[0, 4], [4, -1], [1, 1]])), r"wrong must be an integer tensor \[n, k\] with n = 2"),
        (dict(correct=torch.tensor([[1, -1], [-1, -1]])), r"row\(s\) \[1\] of correct have no valid id"),
        (dict(wrong=torch.tensor([[0, 4], [-1, -1]])), r"'logit_diff' needs a wrong id in every row"),
        (dict(wrong=torch.tensor([[-1, -1], [4, -1]]), metric="prob_diff"), r"'prob_diff' needs a wrong id"),
        (dict(correct=torch.tensor([[-1, 1], [2, 3]]), metric="logprob"), r"correct\[:, 0\], which is -1"),
        (dict(d_vocab=5), r"clean has token id 5 >= d_vocab 5"),
        (dict(correct=torch.tensor([[9, -1], [2, 3]]), d_vocab=6), r"correct has token id 9 >= d_vocab 6"),
        (dict(metric="accuracy"), r"unknown metric 'accuracy'.*logit_diff.*prob_diff.*logprob"),
        (dict(positions={"X": torch.tensor([1, 4])}), r"position 'X' is out of range \[0, 4\)"),
        (dict(positions={"X": torch.tensor([1])}), r"position 'X' must be 2 integer token indices"),
        (dict(prompts=("a",)), r"prompts must be empty or hold one text per prompt \(2\)"),
    ],
)
def test_bad_tasks_fail_with_the_problem_named(kw, message):
    with pytest.raises(ValueError, match=message):
        toy_task(**kw)


def test_logprob_needs_no_wrong_ids():
    task = toy_task(metric="logprob", wrong=torch.full((2, 1), -1))
    assert task.score(torch.zeros(2, 6)).allclose(torch.full((2,), -torch.log(torch.tensor(6.0))))


def test_subset_takes_the_same_rows_of_every_field():
    task = toy_task(corrupted_prompts=("c", "d"))
    for idx in (slice(1, 2), [1], torch.tensor([1]), torch.tensor([False, True]), -1, 1):
        sub = task.subset(idx)
        assert sub.n == 1 and sub.clean[0].tolist() == [5, 2, 3, 4] and sub.corrupted[0].tolist() == [5, 1, 3, 4]
        assert sub.correct[0].tolist() == [2, 3] and sub.wrong[0].tolist() == [4, -1]
        assert sub.positions["X"].tolist() == [2] and sub.positions["end"].tolist() == [3]
        assert sub.prompts == ("b",) and sub.corrupted_prompts == ("d",) and sub.metric == task.metric
    both = task.subset([1, 0])
    assert both.clean.tolist() == task.clean.flip(0).tolist() and both.prompts == ("b", "a")
    with pytest.raises(IndexError, match="out of range"):
        task.subset([2])
    with pytest.raises(ValueError, match="n == 0"):
        task.subset(slice(2, None))


# --- induction (any tokenizer) ---------------------------------------------------------------------------


def test_predecessor_on_the_byte_tokenizer():
    from tlgeo.patching.tasks import predecessor_task

    tok = byte_tokenizer()
    task = predecessor_task(tok, n=8, seed=3, bos=tok.bos_token_id, length=6)
    assert task.clean.shape == task.corrupted.shape == (8, 9) and task.metric == "logprob"
    for clean, bad, correct in zip(task.clean.tolist(), task.corrupted.tolist(), task.correct[:, 0].tolist()):
        r, sep, query = clean[1:7], clean[7], clean[8]
        j = r.index(query)
        assert sep == tok.bos_token_id and j >= 1 and correct == r[j - 1] and len(set(r)) == 6
        diff = [i for i in range(9) if clean[i] != bad[i]]
        assert diff == [j] and bad[j] not in r  # only the token before the query's occurrence, replaced
    assert task.positions["end"].tolist() == [8] * 8


def test_lookback_on_the_byte_tokenizer():
    from tlgeo.patching.tasks import lookback_task
    from tlgeo.train.data import FILL

    tok = byte_tokenizer()
    task = lookback_task(tok, n=8, seed=3, bos=tok.bos_token_id, length=6)
    assert task.clean.shape == task.corrupted.shape == (8, 10) and task.metric == "logit_diff"
    rows = zip(task.clean.tolist(), task.corrupted.tolist(), task.correct[:, 0].tolist(), task.wrong[:, 0].tolist())
    for clean, bad, correct, wrong in rows:
        r, sep, query, fill = clean[1:7], clean[7], clean[8], clean[9]
        j = r.index(query)
        assert sep == tok.bos_token_id and fill == FILL and j >= 1 and correct == r[j - 1] and len(set(r)) == 6
        q = bad[1:7]
        assert bad[7:] == [sep, q[j], FILL] and wrong == q[j - 1]  # the same question about other tokens
        assert not set(q) & set(r) and FILL not in r + q
    assert task.positions["end"].tolist() == [9] * 8
    with pytest.raises(TaskError, match="besides the filler"):
        lookback_task(tok, n=2, length=6, min_id=248, max_id=262)  # 12 ids, one the filler


def test_induction_on_the_byte_tokenizer():
    tok = byte_tokenizer()
    task = induction_task(tok, n=8, seed=3, bos=tok.bos_token_id, length=6)
    assert task.clean.shape == task.corrupted.shape == (8, 12) and task.metric == "logprob"
    assert (task.clean[:, 0] == tok.bos_token_id).all() and (task.wrong == -1).all()
    special = set(tok.all_special_ids)
    for clean, bad, correct in zip(task.clean.tolist(), task.corrupted.tolist(), task.correct[:, 0].tolist()):
        r, q = clean[1:7], bad[1:7]
        assert clean[7:] == r[:-1] and bad[7:] == r[:-1] and correct == r[-1]  # the end predicts r_L
        assert len(set(r + q)) == 12  # distinct, and the corrupted half shares no token with the clean one
        assert all(3 <= t < len(tok) and t not in special for t in r + q)
    assert task.positions["end"].tolist() == [11] * 8
    again = induction_task(tok, n=8, seed=3, bos=tok.bos_token_id, length=6)
    assert torch.equal(again.clean, task.clean) and torch.equal(again.corrupted, task.corrupted)
    assert not torch.equal(induction_task(tok, n=8, seed=4, bos=tok.bos_token_id, length=6).clean, task.clean)
    no_bos = induction_task(tok, n=2, length=6)
    assert no_bos.clean.shape == (2, 11)
    with pytest.raises(TaskError, match="needs 20"):
        induction_task(tok, n=2, length=10, min_id=3, max_id=20)


def test_builders_that_cannot_work_on_a_byte_tokenizer_say_why():
    tok = byte_tokenizer()
    with pytest.raises(TaskError, match="only 0 single-token names in this tokenizer: the IOI task needs at least 5"):
        ioi_task(tok, n=4)
    with pytest.raises(TaskError, match="agreement task"):  # " is" and " are" share their first byte
        agreement_task(tok, n=4, paradigms=ONE_PREFIX[:1])
    assert issubclass(TaskError, ValueError)
    with pytest.raises(TaskError, match="splits ' 1732'"):
        greater_than_task(WordTokenizer(r" ?\d+| ?[A-Za-z]+"), n=4)
    with pytest.raises(ValueError, match="n must be a positive integer"):
        induction_task(tok, n=0)


# --- builders on a toy GPT-2-like tokenizer ---------------------------------------------------------------


def test_greater_than_with_two_digit_year_tokens():
    tok = WordTokenizer()
    task = greater_than_task(tok, n=40, seed=1, bos=None)
    assert task.n == 40 and task.metric == "prob_diff"
    for i in range(task.n):
        text, yy_at = task.prompts[i], int(task.positions["YY"][i])
        yy = re.search(r" \d\d(\d\d) to", text).group(1)
        assert 2 <= int(yy) <= 98 and tok.decode([int(task.clean[i, yy_at])]) == yy
        diff = (task.clean[i] != task.corrupted[i]).nonzero().flatten().tolist()
        assert diff == [yy_at] and tok.decode([int(task.corrupted[i, yy_at])]) == "01"
        correct = [tok.decode([t]) for t in task.correct[i].tolist() if t >= 0]
        wrong = [tok.decode([t]) for t in task.wrong[i].tolist() if t >= 0]
        assert correct == [f"{v:02d}" for v in range(int(yy) + 1, 100)]
        assert wrong == [f"{v:02d}" for v in range(int(yy) + 1)]  # "00" too, though " 1700" is one token
        assert tok.decode(task.clean[i].tolist()) == text


def test_ioi_on_a_toy_tokenizer_puts_the_names_where_the_positions_say():
    tok = WordTokenizer()
    task = ioi_task(tok, n=30, seed=2, bos=None)
    assert task.n == 30
    for i in range(task.n):
        io, s1, s2 = (int(task.positions[k][i]) for k in ("IO", "S1", "S2"))
        assert task.clean[i, io] == task.correct[i, 0] and task.clean[i, s1] == task.clean[i, s2] == task.wrong[i, 0]
        assert s1 < s2 and io < s2


# --- builders on the real SmolLM2 tokenizer ---------------------------------------------------------------


def strip(tok, ids):
    return [tok.decode([t]).strip() for t in ids]


@pytest.mark.real
def test_ioi_prompts_differ_only_at_the_names(smollm2):
    tok, bos = smollm2.tokenizer, smollm2.tokenizer.bos_token_id
    task = ioi_task(tok, n=24, seed=0, bos=bos)
    assert task.n == 24 and (task.clean[:, 0] == bos).all() and len(set(task.prompts)) == 24
    for i in range(task.n):
        at = {k: int(task.positions[k][i]) for k in ("IO", "S1", "S2")}
        io, s = strip(tok, [int(task.correct[i, 0]), int(task.wrong[i, 0])])
        assert io in NAMES and s in NAMES and io != s and (task.correct[i, 1:] == -1).all()
        assert strip(tok, [int(task.clean[i, at[k]]) for k in ("IO", "S1", "S2")]) == [io, s, s]
        diff = set((task.clean[i] != task.corrupted[i]).nonzero().flatten().tolist())
        assert diff == set(at.values())
        abc = strip(tok, [int(task.corrupted[i, at[k]]) for k in ("IO", "S1", "S2")])
        assert len(set(abc)) == 3 and not set(abc) & {io, s} and set(abc) <= set(NAMES)
        assert tok.decode(task.clean[i, 1:].tolist()) == task.prompts[i]
        assert tok.decode(task.corrupted[i, 1:].tolist()) == task.corrupted_prompts[i]
        assert task.prompts[i].count(s) == 2 and task.prompts[i].count(io) == 1
    again = ioi_task(tok, n=24, seed=0, bos=bos)
    assert torch.equal(again.clean, task.clean) and again.prompts == task.prompts
    assert ioi_task(tok, n=24, seed=1, bos=bos).prompts != task.prompts


@pytest.mark.real
def test_greater_than_prompts_differ_only_in_the_year(smollm2):
    tok, bos = smollm2.tokenizer, smollm2.tokenizer.bos_token_id
    task = greater_than_task(tok, n=24, seed=0, bos=bos)
    assert task.n == 24 and task.metric == "prob_diff" and len(set(task.prompts)) == 24
    for i in range(task.n):
        text, at = task.prompts[i], int(task.positions["YY"][i])
        cc, yy = re.search(r" (\d\d)(\d\d) to the year (\d\d)$", text).group(1, 2)
        assert cc in CENTURIES and 1 <= int(yy[0]) <= 8
        assert strip(tok, task.clean[i, at : at + 2].tolist()) == [yy[0], yy[1]]
        assert strip(tok, task.corrupted[i, at : at + 2].tolist()) == ["0", "1"]
        diff = (task.clean[i] != task.corrupted[i]).nonzero().flatten().tolist()
        assert at in diff and set(diff) <= {at, at + 1}
        correct = strip(tok, [t for t in task.correct[i].tolist() if t >= 0])
        wrong = strip(tok, [t for t in task.wrong[i].tolist() if t >= 0])
        assert correct == [str(d) for d in range(int(yy[0]) + 1, 10)] and wrong == [str(d) for d in range(int(yy[0]))]
        assert tok.decode(task.clean[i, 1:].tolist()) == text and task.corrupted_prompts[i] == text.replace(
            f"{cc}{yy} to", f"{cc}01 to"
        )


@pytest.mark.real
def test_agreement_corruption_is_a_prefix_with_the_verbs_swapped(smollm2):
    tok, bos = smollm2.tokenizer, smollm2.tokenizer.bos_token_id
    task = agreement_task(tok, n=32, seed=0, bos=bos)
    pairs = defaultdict(set)  # prefix -> {(first token of good, of bad)} over the one-prefix paradigms
    for paradigm in ONE_PREFIX:
        for line in (data_dir() / "blimp" / f"{paradigm}.jsonl").read_text().splitlines():
            r = json.loads(line)
            first = [tok.encode(" " + r[f"one_prefix_word_{k}"], add_special_tokens=False)[0] for k in ("good", "bad")]
            pairs[r["one_prefix_prefix"]].add(tuple(first))
    assert task.n == 32 and task.metric == "logit_diff" and list(task.positions) == ["end"]
    for i in range(task.n):
        good, bad = int(task.correct[i, 0]), int(task.wrong[i, 0])
        assert good != bad and (good, bad) in pairs[task.prompts[i]]
        assert (bad, good) in pairs[task.corrupted_prompts[i]]  # the corrupted subject prefers the wrong verb
        assert task.prompts[i] != task.corrupted_prompts[i]
        assert tok.decode(task.clean[i, 1:].tolist()) == task.prompts[i]
        assert tok.decode(task.corrupted[i, 1:].tolist()) == task.corrupted_prompts[i]
    with pytest.raises(ValueError, match="has no one-prefix rows"):
        agreement_task(tok, n=4, paradigms=["regular_plural_subject_verb_agreement_2"])


@pytest.mark.real
def test_smollm2_does_the_tasks(smollm2):
    with pytest.raises(ValueError, match="unknown task 'copy'; known tasks"):
        build_task("copy", smollm2, n=4)
    results = {}
    for name in TASKS:
        if name == "tracr":  # a compiled program's task: refused on any other model
            with pytest.raises(TaskError, match="no tracr.json, so no compiled tracr program"):
                build_task(name, smollm2, n=8, seed=0)
            continue
        task = build_task(name, smollm2, n=8, seed=0)
        assert task.d_vocab == smollm2.cfg.d_vocab and task.n == 8
        results[name] = r = clean_accuracy(smollm2, task, batch_size=8)
        assert r["n"] == 8 and 0 <= r["accuracy"] <= 1 and 0 <= r["corrupted_accuracy"] <= 1
        print(name, {k: round(v, 3) for k, v in r.items()})
    assert results["ioi"]["accuracy"] > 0.8


def test_build_task_on_a_tiny_model(llama):
    task = build_task("induction", llama, n=4, seed=0, length=5)
    assert task.d_vocab == 258 and (task.clean[:, 0] == llama.tokenizer.bos_token_id).all()
    r = clean_accuracy(llama, task, batch_size=3)
    assert set(r) == {"n", "accuracy", "clean_metric", "corrupted_metric", "corrupted_accuracy"} and r["n"] == 4
    assert r["clean_metric"] < 0 and r["corrupted_metric"] < 0  # log-probabilities


def test_a_constant_metric_is_refused():
    from tlgeo.patching.tasks import Task

    toks = torch.tensor([[1, 2, 3], [1, 2, 4]])
    with pytest.raises(ValueError, match=r"row\(s\) \[1\] have the same correct and wrong ids"):
        Task("t", toks, toks.flip(1), correct=torch.tensor([[5, -1], [6, 7]]), wrong=torch.tensor([[6, -1], [7, 6]]))


@pytest.mark.real
def test_a_task_from_texts_checks_lengths_and_single_token_answers(smollm2):
    from tlgeo.patching.tasks import TaskError, task_from_texts

    t = task_from_texts(
        smollm2,
        "capitals",
        ["The Eiffel Tower is in the city of", "The Colosseum is in the city of"],
        ["The Colosseum is in the city of", "The Eiffel Tower is in the city of"],
        [" Paris", " Rome"],
        [" Rome", " Paris"],
    )
    assert t.clean.shape == t.corrupted.shape and t.clean[0, 0] == smollm2.tokenizer.bos_token_id
    assert smollm2.tokenizer.decode(t.correct[0]) == " Paris" and smollm2.tokenizer.decode(t.wrong[1]) == " Paris"
    with pytest.raises(TaskError, match=r"answer . cerulean. of prompt 0 is 3 tokens"):
        task_from_texts(smollm2, "x", ["The sky is"], ["The sea is"], [" cerulean"], [" red"])
    with pytest.raises(TaskError, match="aligned positions"):
        task_from_texts(smollm2, "x", ["The sky is"], ["The big blue sea is"], [" blue"], [" red"])
    with pytest.raises(TaskError, match="one token length"):
        task_from_texts(
            smollm2,
            "x",
            ["The sky is", "The big blue sea is"],
            ["The sea is", "The big blue sky is"],
            [" blue", " blue"],
            [" red", " red"],
        )


def test_the_lookback_task_s_filler_is_the_lookback_data_s():
    from tlgeo.patching.tasks.induction import LOOKBACK_FILL
    from tlgeo.train.data import FILL

    assert LOOKBACK_FILL == FILL
