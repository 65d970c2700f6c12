"""The parameters of the directional-decomposition commands: one frozen config per analysis, checked once.

* :class:`DecompositionConfig`: ``tlgeo decompose``, the main job (the parallel-ratio profile, then
  perplexity with each part removed at every site). Its ``skip_first``, ``context`` and
  ``profile_tokens`` are also the atlas budgets ``decomposition_<name>`` (:mod:`.atlas`).
* :class:`ProfileConfig`: ``tlgeo profile`` (parallel ratios per layer, site and token).
* :class:`PplConfig`: ``tlgeo ppl`` (perplexity unedited and under one edit).
* the paper's other experiments, each a command and an atlas step: :class:`SweepsConfig`
  (``tlgeo sweeps``), :class:`CompareConfig` (``tlgeo compare``), :class:`HeadsConfig` (``tlgeo heads``),
  :class:`MlpCarrierConfig` (``tlgeo mlp-carrier``), :class:`ClosedFormConfig` (``tlgeo closed-form``) and
  :class:`AuditConfig` (``tlgeo audit``).

Each command's flags, and the notebook's keyword arguments, are these classes' fields. The
text is named, not held: ``corpus`` is read with :func:`tlgeo.data.load_text` when the
analysis runs. A window too long for a model is refused by :meth:`check_fits` before any work.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import InputError
from ..runner.analysis import Config, param
from ..runner.cliargs import TOKENS
from ..hooks.edits import SKIP_FIRST, Edit
from ..models import Model
from ..families import check_support
from ..hooks.sites import DECOMPOSITION_SITES, SITES, UnknownSiteError, get_site
from .compare import removal_edits
from .sweeps import S_PAR_GRID, S_PERP_GRID, SWEEP_SITES

__all__ = [
    "CorpusConfig",
    "DecompositionConfig",
    "ProfileConfig",
    "PplConfig",
    "SweepsConfig",
    "CompareConfig",
    "HeadsConfig",
    "MlpCarrierConfig",
    "ClosedFormConfig",
    "AuditConfig",
]

SKIP_FIRST_HELP = "leave the first n blocks unedited (the reference code skips block 0)"


def _site_names(field: str, sites, decomposition_only: bool) -> tuple[str, ...]:
    """``sites`` as registered names (repeats dropped), or a ValueError naming ``field``."""
    try:
        names = tuple(dict.fromkeys(get_site(s).name for s in sites))
    except UnknownSiteError as e:
        raise InputError(f"{field}: {e}") from None
    if not names:
        raise InputError(f"{field}: no site given; choose from {tuple(SITES)}")
    bad = [s for s in names if decomposition_only and not SITES[s].is_decomposition]
    if bad:
        raise InputError(
            f"{field}: site(s) {bad} edit the pattern and have no decomposition to profile; "
            f"choose from {DECOMPOSITION_SITES}"
        )
    return names


@dataclass(frozen=True)
class _Corpus(Config):
    """A corpus to read (the heads' windows: ``texts`` x ``length`` of it)."""

    corpus: str = param(
        "wikitext2", "named corpus (wikitext2, austen, mobydick, bible, ...), a text file, or hf:<dataset>"
    )

    def validate(self) -> None:
        if not isinstance(self.corpus, str) or not self.corpus.strip():
            raise InputError(f"corpus: give a corpus name, a text file or hf:<dataset>, got {self.corpus!r}")
        for f in dataclasses.fields(self):
            v, least = getattr(self, f.name), f.metadata.get("min", 1)
            if f.type in ("int", int) and (isinstance(v, bool) or not isinstance(v, int) or v < least):
                raise InputError(f"{f.name}: must be an integer >= {least}, got {v!r}")

    def _windows(self) -> tuple[str, ...]:
        """The fields that are window lengths (checked against the model's context by :meth:`check_fits`)."""
        return ()

    def _sites(self) -> tuple[str, ...]:
        """The sites a run acts on (checked against the model's family by :meth:`check_fits`)."""
        return tuple(getattr(self, "sites", ()))

    def fit_to(self, n_ctx: int) -> tuple["_Corpus", list[str]]:
        """This config with the window lengths left at their default cut to a model context of ``n_ctx``
        tokens, and one note per cut (a length given that does not fit still fails in :meth:`check_fits`)."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        cut = {n: n_ctx for n in self._windows() if getattr(self, n) > n_ctx and getattr(self, n) == defaults[n]}
        notes = [
            f"--{n.replace('_', '-')}: the default {getattr(self, n)} is above the model's context of {n_ctx} "
            f"tokens; using {n_ctx}"
            for n in cut
        ]
        return (self.replace(**cut) if cut else self), notes

    def check_fits(self, model: Model) -> None:
        """Window lengths that do not fit ``model``, and sites its family refuses, fail before any work
        (the message names the flag or the reason)."""
        check_support(model, *self._sites())
        for name in self._windows():
            n = getattr(self, name)
            if n > model.cfg.n_ctx:
                raise InputError(
                    f"--{name.replace('_', '-')} {n} exceeds the model's context of {model.cfg.n_ctx} tokens"
                )


@dataclass(frozen=True)
class CorpusConfig(_Corpus):
    """What the perplexity and the profile read: a corpus and how many of its tokens."""

    tokens: int = param(2048, "text tokens to use (0 = all)", min=0, type=TOKENS)

    @property
    def max_tokens(self) -> int | None:
        """``tokens``, with 0 (all) as ``None``."""
        return self.tokens or None


@dataclass(frozen=True)
class DecompositionConfig(CorpusConfig):
    """Profile the parallel ratio per layer and site, then measure perplexity with the parallel
    (``s_par=0``) or perpendicular (``s_perp=0``) part removed at every site."""

    context: int = param(512, "tokens per perplexity window", atlas=256)
    profile_tokens: int = param(
        1024,
        "tokens profiled",
        atlas=512,
        cost="linear: one forward of them, with statistics at each decomposition site",
    )
    profile_seq_len: int = param(256, "tokens per profiled window")
    skip_first: int = param(SKIP_FIRST, SKIP_FIRST_HELP, min=0)
    sites: tuple[str, ...] = param(
        tuple(SITES),
        "sites whose parallel part, and (decomposition sites) "
        "perpendicular part, is removed; the decomposition sites among "
        "them are profiled",
        item=str,
    )
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

    site: str | None = param(None, "attn, mlp, block, value_full, value_excl_self or diag (tlgeo sites)", required=True)
    s_par: float = param(1.0, "scale of the parallel part (0 removes it)")
    s_perp: float = param(1.0, "scale of the perpendicular part (0 removes it)")
    layers: tuple[int, ...] | None = param(None, "blocks to edit, e.g. 3,5,10-12 (default: all)", indices=True)
    skip_first: int = param(SKIP_FIRST, SKIP_FIRST_HELP, min=0)
    heads: tuple[int, ...] | None = param(
        None, "query heads, e.g. 0,2 (per-head sites only; default: all)", indices=True
    )
    context: int = param(512, "tokens per perplexity window")
    batch_size: int = param(4, "perplexity windows per forward")

    def validate(self) -> None:
        super().validate()
        if self.site is None:
            raise InputError(f"site: required; choose from {tuple(SITES)}")
        try:
            e = self.edit()  # the site, the scales (finite; s_perp 1 at diag)
        except UnknownSiteError as err:
            raise InputError(f"site: {err}") from None
        object.__setattr__(self, "site", e.site.name)

    def _windows(self) -> tuple[str, ...]:
        return ("context",)

    def _sites(self) -> tuple[str, ...]:
        return (self.site,)

    def edit(self) -> Edit:
        """The edit measured (its layers and heads are checked against a model by ``Edit.hooks``)."""
        return Edit(self.site, self.s_par, self.s_perp, self.layers, self.skip_first, self.heads)

    def check_shape(self, shape) -> None:
        """The edited layers and heads inside the model (``shape``: its blocks and heads, from its config), before
        its weights load."""
        from types import SimpleNamespace

        from ..hooks.adapter import resolve_heads, resolve_layers

        e = self.edit()
        blocks = SimpleNamespace(n_layers=shape.n_layers, n_heads=shape.n_heads)
        resolve_layers(blocks, e.layers, e.skip_first)
        resolve_heads(blocks, e.site, e.heads)


# ---------------------------------------------------------------------------
# the experiments of the paper beyond the main job: one config each (tlgeo sweeps | compare | heads |
# mlp-carrier | closed-form | audit, and the atlas steps of those names)
# ---------------------------------------------------------------------------

_BATCH_HELP = "windows per forward (0: 1024 // context)"


@dataclass(frozen=True)
class _EditedCorpusConfig(CorpusConfig):
    """A corpus scored in windows of ``context`` with edits from block ``skip_first`` on."""

    context: int = param(512, "tokens per perplexity window", atlas=256)
    skip_first: int = param(SKIP_FIRST, SKIP_FIRST_HELP, min=0)
    batch_size: int = param(0, _BATCH_HELP, min=0)

    def _windows(self) -> tuple[str, ...]:
        return ("context",)

    def batch(self) -> int:
        """Windows per forward: ``batch_size``, or ``1024 // context`` (at least 1)."""
        return self.batch_size or max(1, 1024 // self.context)


@dataclass(frozen=True)
class SweepsConfig(_EditedCorpusConfig):
    """Perplexity with the parallel part (``s_par``) or the perpendicular part (``s_perp``) of every site
    scaled over a grid (the paper's Figure 3)."""

    tokens: int = param(
        2048,
        "text tokens scored per sweep point (0 = all)",
        min=0,
        type=TOKENS,
        atlas=512,
        cost="linear: an unedited pass and one per grid point resumed at --skip-first (tlgeo atlas: "
        "compare's perplexity passes too)",
    )
    sites: tuple[str, ...] = param(SWEEP_SITES, "sites swept", item=str)
    s_par_grid: tuple[float, ...] = param(
        S_PAR_GRID,
        "s_par values swept",
        item=float,
        atlas=(-1.0, 0.0, 0.5, 3.0),
        cost="per value: one pass of the tokens per site, resumed at --skip-first",
    )
    s_perp_grid: tuple[float, ...] = param(
        S_PERP_GRID,
        "s_perp values swept (not at diag)",
        item=float,
        atlas=(0.0, 1.5),
        cost="per value: one pass of the tokens per decomposition site, resumed at --skip-first",
    )

    def validate(self) -> None:
        super().validate()
        object.__setattr__(self, "sites", _site_names("sites", self.sites, False))


@dataclass(frozen=True)
class CompareConfig(_EditedCorpusConfig):
    """Each site's parallel part scaled by each of ``scales``: perplexity, zero-shot accuracy and
    RULER-style long-context score against the unedited model (the paper's Tables 1, 2, 8)."""

    tokens: int = param(2048, "text tokens scored per condition (0 = all)", min=0, type=TOKENS, atlas=512)
    sites: tuple[str, ...] = param(
        ("value_excl_self", "value_full", "attn", "diag"),
        "sites compared",
        item=str,
        cost="per site: a perplexity pass per scale, zero-shot at --zeroshot-scales, RULER if a --ruler-sites site",
    )
    scales: tuple[float, ...] = param(
        (0.0, 0.5),
        "s_par values compared",
        item=float,
        cost="per value: a perplexity pass per site, RULER of --ruler-sites, zero-shot if in --zeroshot-scales",
    )
    zeroshot_tasks: tuple[str, ...] = param(
        ("piqa", "arc_easy", "winogrande"),
        "zero-shot tasks (piqa, arc_easy, arc_challenge, openbookqa, winogrande, boolq)",
        item=str,
        cost="per task: its items scored in every zero-shot condition (unedited, each site at --zeroshot-scales)",
    )
    zeroshot_scales: tuple[float, ...] = param(
        (0.0,),
        "of the compared scales, those whose removals zero-shot "
        "scores besides the unedited model (the paper's Table 1: 0)",
        item=float,
        cost="per scale: every zero-shot task's items under each compared site",
    )
    zeroshot_limit: int = param(
        100,
        "first n items of each zero-shot task (below 50: indication only)",
        atlas=20,
        cost="linear: each item's choices scored per task and zero-shot condition",
    )
    ruler_tasks: tuple[str, ...] = param(
        ("niah_single", "vt"),
        "RULER-style tasks (the atlas runs none unless "
        "given: the samples it can afford decide nothing; give enough "
        "--ruler-samples for a CI)",
        item=str,
        atlas=(),
        cost="per task: --ruler-samples greedy answers per length and RULER condition",
    )
    ruler_sites: tuple[str, ...] = param(
        ("value_excl_self", "value_full"),
        "of the compared sites, those whose removals RULER scores besides the unedited model (the paper's Table 2)",
        item=str,
        cost="per site: every RULER task, length and sample under each compared scale",
    )
    ruler_lengths: tuple[int, ...] = param(
        (1024,),
        "RULER prompt lengths in tokens (none: no RULER)",
        item=int,
        cost="per length: a prompt that long and its greedy answer, per sample, task and RULER condition",
    )
    ruler_samples: int = param(
        10,
        "RULER samples per task and length (below 10: indication only)",
        atlas=1,
        cost="linear: a prompt and its greedy answer per sample, task, length and RULER condition",
    )
    ruler_template: str = param(
        "base", "RULER prompts as raw text (base) or in the tokenizer's chat template", choices=("base", "chat")
    )
    seed: int = param(0, "seed of the RULER samples and of the paired bootstrap", min=0)

    def validate(self) -> None:
        super().validate()
        self._check_choices()
        object.__setattr__(self, "sites", _site_names("sites", self.sites, False))
        object.__setattr__(
            self, "ruler_sites", _site_names("ruler_sites", self.ruler_sites, False) if self.ruler_sites else ()
        )

    def edits(self) -> list[Edit]:
        """One edit per site and scale, site first."""
        return [Edit(s, s_par=float(v), skip_first=self.skip_first) for s in self.sites for v in self.scales]


@dataclass(frozen=True)
class HeadsConfig(_Corpus):
    """Per head: the mean alpha of the exclude-self update, and the change of loss when its parallel part
    is removed in that head alone (the paper's Figure 7)."""

    texts: int = param(
        32,
        "texts (windows of the corpus)",
        atlas=8,
        cost="linear: the alpha map's forward and n_heads + 1 forwards resumed at each probed block",
    )
    length: int = param(128, "tokens per text", atlas=80, cost="every forward grows with it (attention quadratically)")
    layers: tuple[int, ...] | None = param(
        None,
        "blocks of the sensitivity map (default: every 6th block from skip_first)",
        indices=True,
        cost="per block: n_heads + 1 forwards of the texts resumed at it",
    )
    skip_first: int = param(SKIP_FIRST, SKIP_FIRST_HELP, min=0)
    n_perm: int = param(2000, "sign-flip permutations of the sensitivity tests (and of the intervals that invert them)")
    seed: int = param(0, "seed of the permutations", min=0)

    def _windows(self) -> tuple[str, ...]:
        return ("length",)

    def sensitivity_layers(self, n_layers: int) -> list[int]:
        """``layers``, or every 6th block from ``max(skip_first, 1)``."""
        if self.layers is not None:
            return list(self.layers)
        return list(range(max(self.skip_first, 1), n_layers, 6))


@dataclass(frozen=True)
class MlpCarrierConfig(_EditedCorpusConfig):
    """No-Para vs No-Perp at the residual MLP site, inside the MLP relative to its input, and per
    down-projection block (the paper's Table 10)."""

    tokens: int = param(
        2048,
        "text tokens scored per run (0 = all)",
        min=0,
        type=TOKENS,
        atlas=512,
        cost="linear: an unedited and 6 edited perplexity passes (10 with a narrow last MLP block)",
    )


@dataclass(frozen=True)
class ClosedFormConfig(CorpusConfig):
    """The diagonal closed form of a value-space parallel edit against the edit itself (the paper's
    Table 5 and Figure 4)."""

    tokens: int = param(
        64,
        "tokens of the one window checked",
        cost="two eager forwards of the window per variant (the edit, its closed form)",
    )
    s_par: float = param(0.0, "the edit's s_par")
    variants: tuple[str, ...] = param(
        ("value_full", "value_excl_self", "attn"),
        "edits checked (attn: the residual form, exact only along z)",
        item=str,
        choices=("value_full", "value_excl_self", "attn"),
    )
    skip_first: int = param(SKIP_FIRST, SKIP_FIRST_HELP, min=0)

    def validate(self) -> None:
        super().validate()
        self._check_choices()

    def _windows(self) -> tuple[str, ...]:
        return ("tokens",)


@dataclass(frozen=True)
class AuditConfig(CorpusConfig):
    """The attention output after W_O under a parallel removal: perturbation, energy and retained norm
    (the paper's Table 6)."""

    tokens: int = param(1024, "text tokens audited, in windows of --context (0 = all)", min=0, type=TOKENS)
    context: int = param(256, "tokens per window")
    sites: tuple[str, ...] = param(("attn", "value_excl_self", "value_full"), "sites audited", item=str)
    s_par: float = param(0.0, "the edit's s_par")
    mode: str = param(
        "all",
        "all: every block edited at once (as the edit is used); each: one block at a time",
        choices=("all", "each"),
    )
    skip_first: int = param(SKIP_FIRST, SKIP_FIRST_HELP, min=0)

    def validate(self) -> None:
        super().validate()
        self._check_choices()
        object.__setattr__(self, "sites", _site_names("sites", self.sites, True))

    def _windows(self) -> tuple[str, ...]:
        return ("context",)
