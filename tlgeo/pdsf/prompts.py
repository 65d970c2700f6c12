"""The PDSF paper's prompt sets, read from ``<data>/pdsf_prompts`` (CC BY 4.0), and how they are tokenized.

* ``specA``: 224 constrained prompts, 14 groups x 16 factorial variants, each with its
  expected single-token answer;
* ``specB``: 96 continuation prompts, 12 groups x 8 variants;
* ``diverse``: 84 long-continuation prompts in 8 regimes (the group is the regime).

:func:`encode_prompts` formats them: ``template="raw"`` (the text as it is, as the authors
do for models they do not template) or ``"chat"`` (the tokenizer's chat template, a user
turn and the generation prompt); ``bos``: prepend the tokenizer's BOS (``None``: as the
model's ``to_tokens`` does, which for SmolLM2's converted tokenizer means yes; the
authors' plain HF load of the same GGUF adds none). The choices go into every result.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Sequence

import torch
from jaxtyping import Int
from torch import Tensor

from ..data import data_dir
from ..errors import InputError
from ..models import Model

__all__ = ["PROMPT_SETS", "PromptSet", "load_prompt_set", "Encoding", "encode_prompts"]

PROMPT_SETS = {
    "specA": "SpecA_prompts_v4_full_factorial.json",
    "specB": "SpecB_experimental_prompts.json",
    "diverse": "Diverse_prompts.json",
}


@dataclass
class PromptSet:
    """Prompts with their group labels (and, for SpecA, the expected answer of each)."""

    name: str
    texts: list[str]
    groups: list[str]
    ids: list[str]
    answers: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.texts)

    def take(self, per_group: int) -> "PromptSet":
        """The first ``per_group`` prompts of every group (order kept)."""
        seen: dict[str, int] = {}
        keep = []
        for i, g in enumerate(self.groups):
            seen[g] = seen.get(g, 0) + 1
            if seen[g] <= per_group:
                keep.append(i)
        pick = lambda xs: [xs[i] for i in keep] if xs else []  # noqa: E731
        return PromptSet(self.name, pick(self.texts), pick(self.groups), pick(self.ids), pick(self.answers))


def load_prompt_set(name: str) -> PromptSet:
    """One of :data:`PROMPT_SETS` from the data directory."""
    if name not in PROMPT_SETS:
        raise InputError(f"unknown prompt set {name!r}; choose from {sorted(PROMPT_SETS)}")
    path = data_dir() / "pdsf_prompts" / PROMPT_SETS[name]
    if not path.exists():
        raise FileNotFoundError(
            f"{path} not found: the PDSF prompt sets live in <data>/pdsf_prompts (see shared/data/README.md)"
        )
    raw = json.loads(path.read_text())
    texts, groups, ids, answers = [], [], [], []
    if name == "diverse":
        for p in raw["prompts"]:
            texts.append(p["prompt"])
            groups.append(p["regime"])
            ids.append(f"{p['group_id']}_{p['variant_id']}")
    else:
        for g in raw["groups"]:
            for v in g["variants"]:
                texts.append(v["prompt"])
                groups.append(g["group_id"])
                ids.append(v["variant_id"] if name == "specA" else f"{g['group_id']}_{v['variant_id']}")
                if name == "specA":
                    answers.append(g["expected_next_token"])
    return PromptSet(name, texts, groups, ids, answers)


@dataclass
class Encoding:
    """How prompts were turned into tokens: recorded with every result."""

    template: str
    bos: bool

    def as_dict(self) -> dict:
        return {"template": self.template, "bos": self.bos}


def encode_prompts(
    model: Model, texts: Sequence[str], *, template: str = "raw", bos: bool | None = None
) -> tuple[list[Int[Tensor, "pos"]], Encoding]:
    """Token ids ``[len]`` of each prompt, and the :class:`Encoding` used."""
    if template not in ("raw", "chat"):
        raise InputError(f"template must be 'raw' or 'chat', got {template!r}")
    if not texts:
        raise InputError("an empty prompt set")
    tok = model.tokenizer
    if bos is None:
        bos = bool(getattr(model.cfg, "default_prepend_bos", True)) and tok.bos_token_id is not None
    if bos and tok.bos_token_id is None:
        raise InputError("bos=True, but the tokenizer has no BOS token")
    if template == "chat" and not getattr(tok, "chat_template", None):
        raise InputError(
            f"template='chat' needs a tokenizer with a chat template; "
            f"{getattr(tok, 'name_or_path', type(tok).__name__)!r} has none (use template='raw')"
        )
    out = []
    for t in texts:
        text = (
            tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=False)
            if template == "chat"
            else t
        )
        ids = tok(text, add_special_tokens=False)["input_ids"]
        if bos and (not ids or ids[0] != tok.bos_token_id):
            ids = [tok.bos_token_id] + ids
        if not ids:
            raise InputError(f"prompt {t!r} has no tokens")
        out.append(torch.tensor(ids, dtype=torch.long))
    return out, Encoding(template, bool(bos))
