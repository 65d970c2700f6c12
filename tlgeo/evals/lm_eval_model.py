"""lm-evaluation-harness model ``tlgeo``: a TransformerBridge with component-scaling edits.

Needs ``pip install -c constraints.txt lm-eval`` (the ``eval`` extra); ``import
tlgeo`` never imports this module. Importing it registers the model name::

    import lm_eval, tlgeo.evals.lm_eval_model  # registers "tlgeo"
    lm_eval.simple_evaluate(
        model="tlgeo",
        model_args="pretrained=smollm2-135m,site=value_excl_self,s_par=0,skip_first=1,batch_size=4",
        tasks=["arc_easy"],
    )

or, from the shell (lm-eval's own CLI with the registration imported first)::

    python -m tlgeo.evals.lm_eval_model --model tlgeo --model_args pretrained=smollm2-135m,site=attn,s_par=0 --tasks piqa

Model args: ``pretrained`` (anything :func:`tlgeo.models.load_model` takes),
``site, s_par, s_perp, skip_first`` and ``layers``/``heads`` (``"3"``, ``"1-29"`` or
``"0|2|5"``; commas separate model args) build one :class:`tlgeo.hooks.edits.Edit`;
``batch_size``, ``max_length`` (default ``n_ctx``), ``prepend_bos`` (default the
model's ``default_prepend_bos``), ``max_gen_toks``, ``device``, ``dtype``. From
Python, ``TLGeoLM(model=bridge, edits=[Edit(...), ...])`` wraps a loaded bridge.

Scoring is :mod:`tlgeo.evals.zeroshot`'s (same tokenization, batching and truncation),
so ``loglikelihood`` equals :func:`tlgeo.evals.zeroshot.score_requests` on the same
pairs. ``loglikelihood_rolling`` is :func:`tlgeo.evals.perplexity.perplexity`'s total
log-likelihood (disjoint windows of ``max_length`` after a BOS; lm-eval's own
rolling windows give the last window more context). ``generate_until`` is greedy,
without a KV cache (every step re-reads the sequence, hooks active).
"""  # noqa: E501

from __future__ import annotations

import sys
from typing import Any, Iterable, Sequence

import torch

try:
    from lm_eval.api.model import LM
    from lm_eval.api.registry import register_model
except ImportError as e:  # pragma: no cover - exercised only without lm-eval
    raise ImportError(
        "tlgeo.evals.lm_eval_model needs lm-evaluation-harness: "
        "pip install -c constraints.txt 'lm-eval>=0.4.5' (or the 'eval' extra)"
    ) from e

from ..errors import InputError
from ..hooks.edits import SKIP_FIRST, Edit
from ..models import input_device
from .perplexity import perplexity
from .zeroshot import _prefix_token, encode_pair, score_requests

__all__ = ["TLGeoLM", "parse_index_list", "main"]

_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


def parse_index_list(value: Any) -> int | tuple[int, ...] | None:
    """``None``/``"all"`` -> None; ``3`` -> 3; ``"1-29"`` -> (1..29); ``"0|2|5"`` -> (0, 2, 5)."""
    if value is None or isinstance(value, int):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(int(v) for v in value)
    s = str(value).strip()
    if s.lower() in {"", "all", "none"}:
        return None
    out: list[int] = []
    for part in s.replace(";", "|").split("|"):
        a, sep, b = part.partition("-")
        try:
            out += list(range(int(a), int(b) + 1)) if sep else [int(a)]
        except ValueError:
            raise InputError(f"bad index list {value!r}: use 3, 1-29 or 0|2|5") from None
    return out[0] if len(out) == 1 and "-" not in s and "|" not in s else tuple(out)


def _bool(value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    s = str(value).strip().lower()
    if s in _TRUE | _FALSE:
        return s in _TRUE
    raise InputError(f"expected a boolean, got {value!r}")


@register_model("tlgeo")
class TLGeoLM(LM):
    """lm-eval ``LM`` over a tlgeo bridge; every forward runs with the edits' hooks."""

    def __init__(
        self,
        pretrained: str = "smollm2-135m",
        site: str | None = None,
        s_par: float = 1.0,
        s_perp: float = 1.0,
        layers: Any = None,
        skip_first: int = SKIP_FIRST,
        heads: Any = None,
        batch_size: int | str = 8,
        max_length: int | None = None,
        prepend_bos: bool | str | None = None,
        max_gen_toks: int = 256,
        device: str | None = None,
        dtype: str = "float32",
        model=None,
        edits: Sequence[Edit] | None = None,
        **unused: Any,
    ) -> None:
        super().__init__()
        unused.pop("max_batch_size", None)  # lm-eval passes it to every model; no auto batch size here
        if unused:
            raise TypeError(f"unknown tlgeo model args {sorted(unused)}")
        if model is None:
            from ..models import load_model

            model = load_model(pretrained, device=device or "cpu", dtype=getattr(torch, str(dtype)))
        self.model = model
        self.edits: list[Edit] = list(edits or ())
        if site is not None and str(site).lower() not in {"", "none"}:
            self.edits.append(
                Edit(
                    site,
                    s_par=float(s_par),
                    s_perp=float(s_perp),
                    layers=parse_index_list(layers),
                    skip_first=int(skip_first),
                    heads=parse_index_list(heads),
                )
            )
        self.fwd_hooks = [h for e in self.edits for h in e.hooks(model)]
        bs = 8 if batch_size in (None, "auto") or str(batch_size).startswith("auto") else int(batch_size)
        if bs < 1:
            raise InputError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = bs
        n_ctx = model.cfg.n_ctx
        self.max_length = n_ctx if max_length is None else int(max_length)
        if not 1 <= self.max_length <= n_ctx:
            raise InputError(f"max_length {self.max_length} must be in [1, n_ctx={n_ctx}]")
        self.prefix_token_id = _prefix_token(model, _bool(prepend_bos))
        self.max_gen_toks = int(max_gen_toks)
        self.pretrained = pretrained if isinstance(pretrained, str) else type(model).__name__

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> "TLGeoLM":
        """Model args win over lm-eval's ``batch_size``/``device`` defaults (no duplicate-keyword error)."""
        from lm_eval.utils import simple_parse_args_string

        return cls.create_from_arg_obj(simple_parse_args_string(arg_string), additional_config)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None) -> "TLGeoLM":
        """As :meth:`create_from_arg_string`, for lm-eval's CLI (which parses model args to a dict)."""
        extra = {k: v for k, v in (additional_config or {}).items() if v is not None and k not in arg_dict}
        return cls(**arg_dict, **extra)

    @property
    def tokenizer(self):
        return self.model.tokenizer

    @property
    def tokenizer_name(self) -> str:
        return str(getattr(self.tokenizer, "name_or_path", self.pretrained)).replace("/", "__")

    def describe(self) -> list[dict]:
        """The edits, as plain dicts."""
        return [e.describe() for e in self.edits]

    # -------------------------------------------------------------- requests

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """``(sum of continuation log-probs, is greedy)`` per ``(context, continuation)``."""
        if not requests:
            return []
        pairs = [
            encode_pair(self.tokenizer, c, x, prefix_token_id=self.prefix_token_id)
            for c, x in (r.args for r in requests)
        ]
        s = score_requests(
            self.model,
            pairs,
            batch_size=self.batch_size,
            fwd_hooks=self.fwd_hooks,
            max_length=self.max_length,
            progress=not disable_tqdm,
        )
        out = [(float(lp), bool(g)) for lp, g in zip(s.logprob.tolist(), s.is_greedy.tolist())]
        for r, o in zip(requests, out):
            self.cache_hook.add_partial("loglikelihood", r.args, o)
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """Total log-likelihood of each string (every token scored, after a BOS)."""
        out = []
        for r in requests:
            (text,) = r.args[:1]
            if not text:
                out.append(0.0)
                continue
            res = perplexity(
                self.model,
                text,
                context=self.max_length,
                batch_size=self.batch_size,
                fwd_hooks=self.fwd_hooks,
                prepend_bos=True,
            )
            ll = -float(res.token_losses.double().sum())
            self.cache_hook.add_partial("loglikelihood_rolling", (text,), ll)
            out.append(ll)
        return out

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Greedy continuation of each context, cut at the first ``until`` string or EOS."""
        out = []
        eos = getattr(self.tokenizer, "eos_token_id", None)
        for r in requests:
            context, kwargs = r.args[0], dict(r.args[1] or {})
            until = kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            n_new = int(kwargs.get("max_gen_toks", self.max_gen_toks))
            text = self.generate(context, n_new, until, eos)
            self.cache_hook.add_partial("generate_until", (context, r.args[1]), text)
            out.append(text)
        return out

    def generate(self, context: str, max_new_tokens: int, until: Iterable[str] = (), eos: int | None = None) -> str:
        """Greedy decoding with the edits active; the context keeps its last tokens."""
        until = [u for u in until if u]
        prefix = [] if self.prefix_token_id is None else [self.prefix_token_id]
        ids = prefix + list(self.tokenizer(context, add_special_tokens=False)["input_ids"])
        if not ids:
            raise InputError("generate_until: empty context and no BOS")
        new: list[int] = []
        device = input_device(self.model)
        with torch.inference_mode():
            for _ in range(max_new_tokens):
                inp = torch.tensor([(ids + new)[-self.max_length :]], device=device)
                logits = self.model.run_with_hooks(inp, fwd_hooks=self.fwd_hooks) if self.fwd_hooks else self.model(inp)
                nxt = int(logits[0, -1].argmax())
                if nxt == eos:
                    break
                new.append(nxt)
                text = self.tokenizer.decode(new)
                if any(u in text for u in until):
                    break
        text = self.tokenizer.decode(new)
        cut = min((text.index(u) for u in until if u in text), default=len(text))
        return text[:cut]


def main(argv: Sequence[str] | None = None) -> None:
    """lm-eval's command line with the ``tlgeo`` model registered."""
    from lm_eval.__main__ import cli_evaluate

    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    cli_evaluate()


if __name__ == "__main__":
    main()
