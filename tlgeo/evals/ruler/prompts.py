"""How a RULER task text becomes a prompt: raw text after BOS, or the tokenizer's chat template.

A task text marks where its question ends and its answer prefix starts with
``_ANSWER``. ``template="base"`` joins the two after BOS (RULER's ``base``);
``template="chat"`` makes the question the user turn of the tokenizer's chat
template and opens the assistant turn with the answer prefix (as RULER formats
instruction-tuned models), with no extra BOS (the template has its own).
"""

from __future__ import annotations

from typing import Sequence

from ...errors import InputError

__all__ = ["TEMPLATES", "prompt_ids"]

TEMPLATES = ("base", "chat")
_ANSWER = "\x1e"  # in a task text: where the question ends and the answer prefix starts


class _Tok:
    """A tokenizer view: ids without special tokens, BOS, context limit, prompt template.

    ``template="base"``: the task text as it is, after BOS (RULER's ``base``).
    ``template="chat"``: the question as the user turn of the tokenizer's chat
    template and the answer prefix as the start of the assistant turn (as
    RULER formats instruction-tuned models); no extra BOS (the template has its own).
    """

    def __init__(self, tokenizer_or_model, template: str = "base"):
        if template not in TEMPLATES:
            raise InputError(f"unknown prompt template {template!r}; choose from {TEMPLATES}")
        self.template = template
        obj = tokenizer_or_model
        if hasattr(obj, "tokenizer") and hasattr(obj, "cfg"):  # a model
            self.tok = obj.tokenizer
            self.n_ctx = int(obj.cfg.n_ctx)
            prepend = bool(getattr(obj.cfg, "default_prepend_bos", True))
        elif callable(obj) and hasattr(obj, "decode"):
            self.tok = obj
            m = getattr(obj, "model_max_length", None)
            self.n_ctx = int(m) if m is not None and m < 10**7 else None
            prepend = True
        else:
            raise TypeError(f"expected a tokenizer or a model with .tokenizer, got {type(obj).__name__}")
        if self.tok is None:
            raise InputError("the model has no tokenizer: RULER prompts need one")
        self.bos = self.tok.bos_token_id if prepend and template == "base" else None
        if template == "chat" and not getattr(self.tok, "chat_template", None):
            raise InputError(
                f"template='chat' needs a tokenizer with a chat template; "
                f"{getattr(self.tok, 'name_or_path', type(self.tok).__name__)!r} has none (use template='base')"
            )

    def frame(self, text: str) -> str:
        """The prompt of a task text: its answer mark replaced by the template's framing."""
        if _ANSWER not in text:
            return text
        question, prefix = text.split(_ANSWER)
        if self.template == "base":
            return question + prefix
        user = [{"role": "user", "content": question.strip()}]
        return self.tok.apply_chat_template(user, add_generation_prompt=True, tokenize=False) + prefix.lstrip()

    def encode(self, text: str) -> list[int]:
        return self.tok(self.frame(text), add_special_tokens=False, verbose=False)["input_ids"]

    def count(self, text: str) -> int:
        return len(self.encode(text)) + (self.bos is not None)

    def ids(self, text: str) -> list[int]:
        return ([self.bos] if self.bos is not None else []) + self.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(list(ids))


def prompt_ids(tokenizer_or_model, prompt: str, template: str = "base") -> list[int]:
    """Token ids of ``prompt`` as evaluated: BOS (when the model prepends one and
    ``template="base"``) + text."""
    return _Tok(tokenizer_or_model, template).ids(prompt)
