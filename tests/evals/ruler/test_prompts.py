from tlgeo.evals.ruler import TASK_NAMES, make_task, prompt_ids

from .conftest import APPROX


def test_chat_template_bpe(smollm2_tokenizer):
    """``template="chat"``: the question is the user turn, the answer prefix opens the
    assistant turn, the template's tokens count in the length, and no BOS is added."""
    tok = smollm2_tokenizer
    start = tok.apply_chat_template(
        [{"role": "user", "content": "x"}], add_generation_prompt=True, tokenize=False
    ).split("x")[0]
    turn = "<|im_end|>\n<|im_start|>assistant\n"
    for task in TASK_NAMES:
        base = make_task(task, tok, 1024, 1, haystack="synthetic")[0]
        chat = make_task(task, tok, 1024, 1, haystack="synthetic", template="chat")[0]
        assert chat.template == "chat" and chat.answers == base.answers
        assert chat.prompt.startswith(start) and chat.prompt.count(turn) == 1
        question, prefix = chat.prompt.split(turn)
        assert base.prompt.endswith(prefix) and prefix.startswith(("The special", "Answer:"))
        assert question.endswith("?") or question.endswith(".")
        ids = prompt_ids(tok, chat.prompt, "chat")
        assert ids == tok(chat.prompt, add_special_tokens=False)["input_ids"]  # no BOS in front
        assert ids.count(tok.convert_tokens_to_ids("<|im_start|>")) == 3  # system, user, assistant
        assert len(ids) == chat.n_tokens and (len(ids) == 1024 if task not in APPROX else 1016 <= len(ids) <= 1024)
