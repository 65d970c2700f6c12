"""RULER-style synthetic long-context tasks, generated offline, and their evaluation.

RULER ("RULER: What's the Real Context Size of Your Long-Context Language
Models?", Hsieh et al. 2024) is not available offline; this package rebuilds its
synthetic task families in spirit, with its templates:

| task               | what is hidden                                   | answer (all must be returned) | metric |
|--------------------|--------------------------------------------------|--------------------------------|--------|
| ``niah_single``    | one key -> one 7-digit value                      | the value                      | all    |
| ``niah_multikey``  | 4 keys, one queried (3 distractors)               | the queried key's value        | all    |
| ``niah_multivalue``| one key with 4 values                             | the 4 values                   | all    |
| ``niah_multiquery``| 4 keys, all queried                               | the 4 values                   | all    |
| ``vt``             | a chain ``VAR A = 12345``, ``VAR B = VAR A``, ...   | every variable of the chain    | all    |
| ``cwe``            | a numbered word list, 10 words repeated often     | the 10 common words            | all    |
| ``fwe``            | coded words drawn with a Zipf law (alpha 2)       | the 3 most frequent (rank 1 is '....') | all |
| ``qa_boolq``       | a BoolQ passage among other BoolQ passages        | yes / no                       | first word |

Haystacks are random contiguous spans of the offline corpora
(``haystack="corpora"``: Austen, Moby Dick or the Bible, one per sample; or a
corpus name) or RULER's noise filler (``haystack="synthetic"``: "The grass is
green. The sky is blue. ..."). Lengths are in tokens of the model's tokenizer,
BOS included; the haystack is cut to hit the target (exactly for the needle
tasks and ``vt``, within one list entry for ``cwe``/``fwe``), never above it.
Needles go to sentence boundaries at the requested depth (fraction of the
haystack before the needle). Everything is seeded and deterministic.

Scoring follows RULER: ``string_match_all`` (fraction of the references found
in the output, averaged over samples, in percent) and ``string_match_part``
(any reference found). ``vt`` starts with a one-shot example, as RULER's
(``one_shot=False`` leaves it out). RULER's QA tasks use SQuAD/HotpotQA, which
are not available offline; ``qa_boolq`` keeps their layout (the gold passage
among distractor documents, the instruction before and after) with BoolQ's
passages and yes/no questions, scored by the first word of the output
(``first_word``; chance is 50%). Its length is hit within a few tokens (the
last document is cut at a word). Instruction-tuned models such as
SmolLM2-Instruct often end their turn at once on this raw (non-chat) prompt;
an empty answer counts as wrong. ``template="chat"`` puts every task's question
in the tokenizer's chat template and opens the assistant turn with the answer
prefix, as RULER does for instruction-tuned models.

Modules: :mod:`.tasks` (task generation), :mod:`.prompts` (base text or chat
template), :mod:`.scoring` (string matching), :mod:`.evaluate` (greedy generation
under hooks and the evaluation grid).

Generation is greedy under the forward hooks, with the bridge's KV cache
(:mod:`.evaluate` says when the cache can be trusted).
"""  # noqa: E501

from .evaluate import KEY, compare_ruler, evaluate_ruler, generate_answers, greedy_generate
from .prompts import TEMPLATES, prompt_ids
from .scoring import METRICS, first_word, string_match_all, string_match_part
from .tasks import HAYSTACKS, NOISE, TASK_NAMES, TASKS, Sample, TaskSpec, make_task

__all__ = [
    "Sample",
    "TaskSpec",
    "TASKS",
    "TASK_NAMES",
    "HAYSTACKS",
    "NOISE",
    "TEMPLATES",
    "make_task",
    "prompt_ids",
    "string_match_all",
    "string_match_part",
    "first_word",
    "METRICS",
    "greedy_generate",
    "generate_answers",
    "evaluate_ruler",
    "compare_ruler",
    "KEY",
]
