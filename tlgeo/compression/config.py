"""The parameters of the compression package: one frozen config per entry point, checked once.

* :class:`CompressConfig`: ``tlgeo compress`` (``scripts/compress.py``): which methods to
  compress with llmcompressor, their calibration and options, and the perplexity /
  zero-shot evaluation of the base and compressed models;
* :class:`CompressionConfig`: ``tlgeo compression`` and :func:`tlgeo.compression.analysis.run`:
  the perpendicular vs parallel error of compressed models against the dense one.

Every flag of the two commands is a field here (``--model``, ``--out``, ``--threads``,
``--ppl`` of compression and ``--verbose`` are the commands' own)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from ..runner.analysis import Config, param
from .methods import UnknownMethodError, parse_method

__all__ = ["CompressConfig", "CompressionConfig", "MODES", "DEFAULT_METHODS"]

MODES = ("local", "e2e")
DEFAULT_METHODS = ("awq", "wanda", "wanda_4_8", "wanda_2_4")


@dataclass(frozen=True)
class CompressConfig(Config):
    """Compress ``methods`` (names of :mod:`tlgeo.compression.methods`) with llmcompressor on
    ``n_calib`` windows of ``calib_seq_len`` tokens of ``calib_corpus``; optionally evaluate the
    base and every method (perplexity, zero-shot)."""

    methods: tuple[str, ...] = param(DEFAULT_METHODS, "comma list of method names", item=str)
    n_calib: int = param(
        32,
        "calibration windows",
        cost="per method, grows with the calibration tokens and the parameters (rtn: calibrates nothing)",
    )
    calib_seq_len: int = param(128, "tokens per calibration window")
    calib_corpus: str = param(
        "wikitext2-valid",
        "calibration text (disjoint from the WikiText-2 test text that perplexity and the diagnosis read)",
    )
    group_size: int = param(64, "AWQ / RTN group size (must divide every input width)")
    awq_grid: int = param(20, "AWQ scale-search grid points (llmcompressor default 20)")
    perp_lambda: float = param(0.0, "weight of the parallel error in *_perp methods without _l<lambda> (1 = isotropic)")
    sensitivity_from: str | None = param(None, "diag_layers.csv whose local block e_perp drives perpalloc")
    sensitivity_method: str | None = param(None, "method of that table (default wanda_s<percent>)")
    alloc_spread: float = param(0.08, "OWL's lambda: layer sparsities within +-2x this")
    owl_m: float = param(5.0, "OWL's M: outliers are scores above M x the mean")
    refit_iters: int = param(12, "CG iterations of the sgpt_perp refit (12 keeps it within 2x of SparseGPT here)")
    max_iso_increase: float = param(
        0.0, "sgpt_perp: isotropic error at most (1 + this) x that of the unreconstructed mask"
    )
    device: str = param("cpu", "cpu, cuda, cuda:N or auto")
    pipeline: str = param(
        "sequential",
        "llmcompressor pipeline for the pruning methods (AWQ and RTN always use sequential)",
        choices=("sequential", "basic"),
    )
    root: str | None = param(None, "parent of <method>/ dirs (default $TLGEO_CACHE/compressed/<model>)")
    force: bool = param(False, "recompress methods already present (also those made with other settings)")
    compress: bool = param(True, "compress the methods (--no-compress: only evaluate existing compressed models)")
    ppl: bool = param(False, "perplexity of the base and every method")
    ppl_corpus: str = param("wikitext2", "perplexity text")
    ppl_tokens: int = param(2048, "perplexity tokens")
    context: int = param(512, "tokens per perplexity window")
    zeroshot_tasks: tuple[str, ...] = param((), "e.g. piqa,arc_easy,winogrande (offline tasks)", item=str)
    zeroshot_limit: int = param(200, "items per zero-shot task")

    def validate(self) -> None:
        self._check_choices()
        if not self.methods:
            raise InputError("methods: no methods given")
        for m in self.methods:
            try:
                parse_method(m, self.group_size, self.perp_lambda)
            except UnknownMethodError as e:
                raise InputError(f"methods: {e}") from None
        if self.calib_seq_len < 2:
            raise InputError(f"calib_seq_len must be >= 2, got {self.calib_seq_len}")
        for name in ("alloc_spread", "max_iso_increase"):
            if getattr(self, name) < 0:
                raise InputError(f"{name} must be >= 0, got {getattr(self, name)}")

    def spec(self, method: str):
        """The :class:`~tlgeo.compression.methods.MethodSpec` of ``method`` under these defaults."""
        return parse_method(method, self.group_size, self.perp_lambda)

    def pipeline_of(self, method: str) -> str:
        """llmcompressor's pipeline for ``method`` (quantisation always ``sequential``)."""
        return "sequential" if self.spec(method).quantizes else self.pipeline


@dataclass(frozen=True)
class CompressionConfig(Config):
    """Diagnose every compressed model (one directory per method under ``root``) against the
    dense model on ``prompts`` windows of ``seq_len`` tokens of ``corpus``: per block and site,
    the error split into its part parallel to the dense update and the rest."""

    methods: tuple[str, ...] = param(DEFAULT_METHODS, "methods under --root (comma list)", item=str)
    root: str | None = param(
        None,
        "folder with one compressed model dir per method (default: "
        "$TLGEO_CACHE/compressed/<model>, as written by tlgeo compress; "
        "<model>-<dtype> for --dtype bfloat16 / float16)",
    )
    corpus: str = param("wikitext2", "held-out text for the prompts")
    prompts: int = param(
        12,
        "number of prompts (windows of the corpus)",
        cost="per prompt and method: a dense forward, each compressed block twice (local), a compressed forward (e2e)",
    )
    seq_len: int = param(128, "tokens per prompt")
    modes: tuple[str, ...] = param(MODES, "local (counterfactual), e2e (own hidden states)", choices=MODES)
    batch_size: int = param(12, "prompts per forward", cli=False)
    compress: CompressConfig | None = param(
        None,
        "compress a method whose folder under root is missing with these settings (the methods "
        "field of this CompressConfig is ignored); None: a missing folder is an error",
        cli=False,
    )

    def settings(self) -> dict:
        """The fields as a plain dict, ``compress`` as its own settings (or ``None``)."""
        out = super().settings()
        out["compress"] = self.compress.settings() if self.compress is not None else None
        return out

    def validate(self) -> None:
        self._check_choices()
        if not self.methods:
            raise InputError("methods: no methods given")
        if len(set(self.methods)) != len(self.methods):
            raise InputError(f"methods: {list(self.methods)} names a method twice")
        if not self.modes:
            raise InputError(f"modes: none given; choose from {MODES}")
        if self.seq_len < 2:
            raise InputError(f"seq_len must be >= 2, got {self.seq_len}")
        if self.compress is not None:
            if not isinstance(self.compress, CompressConfig):
                raise InputError(f"compress must be a CompressConfig or None, got {type(self.compress).__name__}")
            for m in self.methods:
                try:
                    self.compress.spec(m)
                except UnknownMethodError as e:
                    raise InputError(f"methods: {e} (compress= needs method names it can compress)") from None
