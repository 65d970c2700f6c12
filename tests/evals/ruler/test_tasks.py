import re
from collections import Counter

import pytest

from tlgeo.evals.ruler import TASK_NAMES, evaluate_ruler, make_task, prompt_ids

from .conftest import APPROX, L, L_LIST, L_LONG, _length


@pytest.mark.parametrize("haystack", ["synthetic", "corpora"])
@pytest.mark.parametrize("task", TASK_NAMES)
def test_length_hits_target(llama, task, haystack):
    length = _length(task)
    samples = make_task(task, llama, length, 2, seed=1, haystack=haystack)
    for s in samples:
        n = len(prompt_ids(llama, s.prompt))
        assert n == s.n_tokens <= length
        if task in APPROX:
            assert length - n <= 8
        else:
            assert n == length
        assert s.answers and s.task == task and s.length == length


def test_length_hits_target_bpe(smollm2_tokenizer):
    """Real BPE tokenizer (no model forward): exact lengths for needles, close for lists."""
    for task in TASK_NAMES:
        for s in make_task(task, smollm2_tokenizer, 1024, 2, haystack="corpora"):
            n = len(smollm2_tokenizer(s.prompt, add_special_tokens=False)["input_ids"]) + 1
            assert n == s.n_tokens
            assert (n == 1024) if task not in APPROX else (1024 - 8 <= n <= 1024)


def _haystack_span(s):
    head_end = s.prompt.index("\n") + 1
    tail_start = s.prompt.rindex("\n")
    return head_end, tail_start


@pytest.mark.parametrize("depth", [0.0, 0.25, 0.5, 0.9, 1.0])
def test_needle_at_requested_depth(llama, depth):
    (s,) = make_task("niah_single", llama, L, 1, haystack="synthetic", depths=depth)
    a, b = _haystack_span(s)
    pos = s.prompt.index(s.needles[0])
    hay_len = (b - a) - sum(len(n) + 1 for n in s.needles)
    assert abs((pos - a) / hay_len - depth) < 0.12  # nearest sentence boundary (short sentences)
    assert s.depth == depth


def test_needle_depth_corpora_bpe(smollm2_tokenizer):
    for d in (0.1, 0.5, 0.8):
        (s,) = make_task("niah_single", smollm2_tokenizer, 1024, 1, haystack="synthetic", depths=d)
        a, b = _haystack_span(s)
        pos = s.prompt.index(s.needles[0])
        enc = lambda t: len(smollm2_tokenizer(t, add_special_tokens=False)["input_ids"])  # noqa: E731
        frac = enc(s.prompt[a:pos]) / enc(s.prompt[a:b])
        assert abs(frac - d) < 0.05


def _parse_needles(prompt):
    return re.findall(r"special magic numbers for ([a-z]+-[a-z]+) is: (\d+)\.", prompt)


@pytest.mark.parametrize("task", ["niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery"])
def test_niah_answers_derivable(llama, task):
    for s in make_task(task, llama, L, 3, haystack="corpora", seed=3):
        pairs = _parse_needles(s.prompt)
        question = s.prompt[s.prompt.rindex("\n") :]
        queried = re.findall(r"[a-z]+-[a-z]+", question.split("mentioned")[0])
        expect = [v for k, v in pairs if k in queried]
        assert sorted(expect) == sorted(s.answers)
        n_needles = {"niah_single": 1, "niah_multikey": 4, "niah_multivalue": 4, "niah_multiquery": 4}[task]
        assert len(pairs) == n_needles
        assert len(set(queried)) == (4 if task == "niah_multiquery" else 1)


@pytest.mark.parametrize("one_shot", [True, False])
def test_vt_answers_derivable(llama, one_shot):
    for s in make_task("vt", llama, L_LONG if one_shot else L, 3, haystack="synthetic", one_shot=one_shot):
        values = re.findall(r"assigned the value (\d+) in the text", s.prompt)
        assert len(values) == (2 if one_shot else 1)
        value = values[-1]
        assign = dict(re.findall(r"VAR ([A-Z]+) = (\d+|VAR [A-Z]+)\.", s.prompt))
        assert len(assign) == (10 if one_shot else 5)  # the example's chain uses other names

        def resolve(x):
            while assign[x].startswith("VAR "):
                x = assign[x][4:]
            return assign[x]

        if one_shot:  # the example is answered correctly, before the real question
            example_answer = s.prompt.split("they are: ")[1].split("\n")[0].split()
            assert example_answer == [v for v in assign if resolve(v) == values[0]]
            assert s.prompt.index("they are: ") < s.prompt.index(f"VAR {s.answers[0]} =")
        expect = {v for v in assign if resolve(v) == value}
        assert expect == set(s.answers) and len(expect) == 5
        # statements appear in chain order
        order = [s.prompt.index(f"VAR {v} =") for v in s.answers]
        assert order == sorted(order)


def test_qa_boolq_gold_passage_and_answer(llama):
    from tlgeo.evals.ruler.tasks import _boolq_items

    items = {q: (p, a) for p, q, a in _boolq_items()}
    for depth in (0.0, 0.5, 1.0):
        (s,) = make_task("qa_boolq", llama, 2000, 1, seed=2, depths=depth)
        question = re.search(r"Question: (.*)\nAnswer:$", s.prompt).group(1)
        passage, answer = items[question]
        assert s.answers == (answer,) and answer in ("yes", "no")
        docs = re.findall(r"Document \d+:\n(.*?)(?=\n\nDocument \d+:|\n\nAnswer the question)", s.prompt, re.S)
        assert len(docs) >= 2 and docs.count(passage) == 1
        assert abs(docs.index(passage) / (len(docs) - 1) - depth) <= 0.5 / (len(docs) - 1) + 1e-9


def test_cwe_answers_derivable(llama):
    for s in make_task("cwe", llama, L_LIST, 2, haystack="synthetic"):
        words = re.findall(r"\d+\. ([a-z]+)", s.prompt)
        counts = Counter(words)
        top = [w for w, _ in counts.most_common(10)]
        assert set(top) == set(s.answers)
        assert min(counts[w] for w in s.answers) > max(c for w, c in counts.items() if w not in s.answers)


def test_fwe_answers_derivable(llama):
    for s in make_task("fwe", llama, L_LIST, 2, haystack="synthetic"):
        text = s.prompt.split("coded words. ", 1)[1].split("\nQuestion")[0]
        counts = Counter(w for w in text.split() if w != "....")
        top = [w for w, _ in counts.most_common(3)]
        assert top == list(s.answers)
        assert counts.most_common(4)[2][1] > counts.most_common(4)[3][1]


def test_deterministic_by_seed(llama):
    a = make_task("niah_multikey", llama, L, 2, seed=5, haystack="corpora")
    b = make_task("niah_multikey", llama, L, 2, seed=5, haystack="corpora")
    c = make_task("niah_multikey", llama, L, 2, seed=6, haystack="corpora")
    assert a == b
    assert [s.prompt for s in a] != [s.prompt for s in c]
    # sample i does not depend on how many samples are drawn (with the same depth)
    one = make_task("niah_multikey", llama, L, 1, seed=5, haystack="corpora", depths=a[0].depth)
    assert one[0] == a[0]


def test_errors(llama):
    with pytest.raises(ValueError, match=r"length 2100 exceeds the model's context of 2048"):
        make_task("niah_single", llama, 2100, 1)
    with pytest.raises(ValueError, match="vt: length 800 leaves"):
        make_task("vt", llama, 800, 1)  # the one-shot example does not fit
    with pytest.raises(ValueError, match="unknown option"):
        make_task("qa_boolq", llama, 2000, 1, one_shot=True)
    with pytest.raises(ValueError, match="unknown RULER task"):
        make_task("qa_1", llama, L, 1)
    with pytest.raises(ValueError, match="unknown haystack"):
        make_task("niah_single", llama, L, 1, haystack="essays")
    with pytest.raises(ValueError, match="leaves"):
        make_task("niah_multiquery", llama, 400, 1)
    with pytest.raises(ValueError, match="depths"):
        make_task("niah_single", llama, L, 1, depths=1.5)
    with pytest.raises(ValueError, match="empty grid"):
        evaluate_ruler(llama, tasks=[], lengths=(L,))
    with pytest.raises(ValueError, match="exceeds the model's context"):
        evaluate_ruler(llama, tasks=["niah_single"], lengths=(2040,))
    with pytest.raises(ValueError, match="unknown prompt template"):
        make_task("niah_single", llama, L, 1, template="llama-3")
    if not getattr(llama.tokenizer, "chat_template", None):
        with pytest.raises(ValueError, match="needs a tokenizer with a chat template"):
            evaluate_ruler(llama, tasks=["niah_single"], lengths=(L,), template="chat")
