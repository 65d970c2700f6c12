"""The parameters of the directional-decomposition commands: one frozen config per analysis, checked once.

* :class:`DecompositionConfig`: ``tlgeo run``, the main job (the parallel-ratio profile, then
  perplexity with each part removed at every site). Its ``skip_first``, ``context`` and
  ``profile_tokens`` are also the atlas budgets of those names (:mod:`.atlas`).
* :class:`ProfileConfig`: ``tlgeo profile`` (parallel ratios per layer, site and token).
* :class:`PplConfig`: ``tlgeo ppl`` (perplexity unedited and under one edit).

Each command's flags, and the notebook's keyword arguments, are these classes' fields. The
text is named, not held: ``corpus`` is read with :func:`tlgeo.data.load_text` when the
analysis runs. A window too long for a model is refused by :meth:`check_fits` before any work.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..analysis import Config, param
from ..cliargs import TOKENS
from ..hooks.edits import SKIP_FIRST, Edit
from ..models import Model
from ..families import check_support
from ..hooks.sites import DECOMPOSITION_SITES, SITES, UnknownSiteError, get_site
from .compare import removal_edits

__all__ = ["CorpusConfig", "DecompositionConfig", "ProfileConfig", "PplConfig"]

SKIP_FIRST_HELP = "leave the first n blocks unedited (the reference code skips block 0)"


def _site_names(field: str, sites, decomposition_only: bool) -> tuple[str, ...]:
    """``sites`` as registered names (aliases resolved, repeats dropped), or a ValueError naming ``field``."""
    try:
        names = tuple(dict.fromkeys(get_site(s).name for s in sites))
    except UnknownSiteError as e:
        raise ValueError(f"{field}: {e}") from None
    if not names:
        raise ValueError(f"{field}: no site given; choose from {tuple(SITES)}")
    bad = [s for s in names if decomposition_only and not SITES[s].is_decomposition]
    if bad:
        raise ValueError(f"{field}: site(s) {bad} edit the pattern and have no decomposition to profile; "
                         f"choose from {DECOMPOSITION_SITES}")
    return names


@dataclass(frozen=True)
class CorpusConfig(Config):
    """What the perplexity and the profile read: a corpus and how many of its tokens."""

    corpus: str = param("wikitext2", "named corpus (wikitext2, austen, mobydick, bible, ...), a text file, or "
                                     "hf:<dataset>")
    tokens: int = param(2048, "text tokens to use (0 = all)", min=0, type=TOKENS)

    def validate(self) -> None:
        if not isinstance(self.corpus, str) or not self.corpus.strip():
            raise ValueError(f"corpus: give a corpus name, a text file or hf:<dataset>, got {self.corpus!r}")
        for f in dataclasses.fields(self):
            v, least = getattr(self, f.name), f.metadata.get("min", 1)
            if f.type in ("int", int) and (isinstance(v, bool) or not isinstance(v, int) or v < least):
                raise ValueError(f"{f.name}: must be an integer >= {least}, got {v!r}")

    @property
    def max_tokens(self) -> int | None:
        """``tokens``, with 0 (all) as ``None``."""
        return self.tokens or None

    def _windows(self) -> tuple[str, ...]:
        """The fields that are window lengths (checked against the model's context by :meth:`check_fits`)."""
        return ()

    def _sites(self) -> tuple[str, ...]:
        """The sites a run acts on (checked against the model's family by :meth:`check_fits`)."""
        return tuple(getattr(self, "sites", ()))

    def fit_to(self, n_ctx: int) -> tuple["CorpusConfig", list[str]]:
        """This config with the window lengths left at their default cut to a model context of ``n_ctx``
        tokens, and one note per cut (a length given that does not fit still fails in :meth:`check_fits`)."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        cut = {n: n_ctx for n in self._windows() if getattr(self, n) > n_ctx and getattr(self, n) == defaults[n]}
        notes = [f"--{n.replace('_', '-')}: the default {getattr(self, n)} is above the model's context of {n_ctx} "
                 f"tokens; using {n_ctx}" for n in cut]
        return (self.replace(**cut) if cut else self), notes

    def check_fits(self, model: Model) -> None:
        """Window lengths that do not fit ``model``, and sites its family refuses, fail before any work
        (the message names the flag or the reason)."""
        check_support(model, *self._sites())
        for name in self._windows():
            n = getattr(self, name)
            if n > model.cfg.n_ctx:
                raise ValueError(f"--{name.replace('_', '-')} {n} exceeds the model's context of "
                                 f"{model.cfg.n_ctx} tokens")


@dataclass(frozen=True)
class DecompositionConfig(CorpusConfig):
    """Profile the parallel ratio per layer and site, then measure perplexity with the parallel
    (``s_par=0``) or perpendicular (``s_perp=0``) part removed at every site."""

    context: int = param(512, "tokens per perplexity window", atlas=256)
    profile_tokens: int = param(1024, "tokens profiled", atlas=512,
                                cost="~0.006 s per token (SmolLM2-135M, 2-core CPU; 3 s at 512)")
    profile_seq_len: int = param(256, "tokens per profiled window")
    skip_first: int = param(SKIP_FIRST, SKIP_FIRST_HELP, min=0)
    sites: tuple[str, ...] = param(tuple(SITES), "sites whose parallel part, and (decomposition sites) "
                                                 "perpendicular part, is removed; the decomposition sites among "
                                                 "them are profiled", item=str)
    batch_size: int = param(4, "perplexity windows per forward")

    def validate(self) -> None:
        super().validate()
        object.__setattr__(self, "sites", _site_names("sites", self.sites, False))

    def _windows(self) -> tuple[str, ...]:
        return ("context", "profile_seq_len")

    def profile_sites(self) -> tuple[str, ...]:
        """The sites profiled: the decomposition sites among :attr:`sites`."""
        return tuple(s for s in self.sites if SITES[s].is_decomposition)

    def edits(self) -> list[Edit]:
        """Every site's parallel part removed, then (decomposition sites) its perpendicular part."""
        return removal_edits(self.sites, skip_first=self.skip_first)


@dataclass(frozen=True)
class ProfileConfig(CorpusConfig):
    """Parallel ratios per layer, site and token."""

    seq_len: int = param(256, "tokens per profiled window")
    sites: tuple[str, ...] = param(DECOMPOSITION_SITES, "sites to profile", item=str)
    per_token: bool = param(False, "also write every token's row (csv.gz, large)")
    batch_size: int = param(8, "windows per forward")

    def validate(self) -> None:
        super().validate()
        object.__setattr__(self, "sites", _site_names("sites", self.sites, True))

    def _windows(self) -> tuple[str, ...]:
        return ("seq_len",)

    def per_token_file(self) -> str:
        """The per-token CSV's name: its settings are in it (``profile_tokens-<corpus>-t<n>-s<len>.csv.gz``)."""
        return f"profile_tokens-{self.corpus}-t{self.tokens or 'all'}-s{self.seq_len}.csv.gz".replace("/", "_")


@dataclass(frozen=True)
class PplConfig(CorpusConfig):
    """Perplexity unedited and under one edit."""

    site: str | None = param(None, "attn, mlp, block, value_full, value_excl_self or diag (tlgeo sites)",
                             required=True)
    s_par: float = param(1.0, "scale of the parallel part (0 removes it)")
    s_perp: float = param(1.0, "scale of the perpendicular part (0 removes it)")
    layers: tuple[int, ...] | None = param(None, "blocks to edit, e.g. 3,5,10-12 (default: all)", indices=True)
    skip_first: int = param(SKIP_FIRST, SKIP_FIRST_HELP, min=0)
    heads: tuple[int, ...] | None = param(None, "query heads, e.g. 0,2 (per-head sites only; default: all)",
                                          indices=True)
    context: int = param(512, "tokens per perplexity window")
    batch_size: int = param(4, "perplexity windows per forward")

    def validate(self) -> None:
        super().validate()
        if self.site is None:
            raise ValueError(f"site: required; choose from {tuple(SITES)}")
        try:
            e = self.edit()  # the site, the scales (finite; s_perp 1 at diag)
        except UnknownSiteError as err:
            raise ValueError(f"site: {err}") from None
        object.__setattr__(self, "site", e.site.name)

    def _windows(self) -> tuple[str, ...]:
        return ("context",)

    def _sites(self) -> tuple[str, ...]:
        return (self.site,)

    def edit(self) -> Edit:
        """The edit measured (its layers and heads are checked against a model by ``Edit.hooks``)."""
        return Edit(self.site, self.s_par, self.s_perp, self.layers, self.skip_first, self.heads)
