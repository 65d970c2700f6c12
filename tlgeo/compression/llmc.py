"""Compress a Hugging Face model with llmcompressor and save it as a dense model.

Method names follow :mod:`tlgeo.compression.methods` (``awq``, ``awq_perp_l0.25``,
``rtn_w3g64``, ``wanda_s70``, ``wanda_2_4``, ``sgpt_perp``, ``owl``, ``perpalloc``, ...):
AWQ / round-to-nearest W<bits>A16 asymmetric group quantisation, Wanda, SparseGPT,
and the direction-aware subclasses of their modifiers (:mod:`.perp_awq`,
:mod:`.perp_wanda`, :mod:`.perp_sparsegpt`) and per-layer allocations (:mod:`.allocation`).

llmcompressor leaves quantisation parameters attached to the modules; the
result is written as an ordinary float32 model directory (fake-quantised /
pruned weights copied into a fresh model, norms rescaled by AWQ's smoothing
included) that :func:`tlgeo.load_model` boots in the bridge. A
``tlgeo_compression.json`` manifest next to the weights records the method,
calibration data, timing and the checks of the sparsity pattern and of the
quantisation grid.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import torch
from torch import Tensor

from ..errors import InputError
from ..models import save_local
from ..storage import seal, write_json
from .methods import MethodSpec, UnknownMethodError, parse_method

__all__ = [
    "MANIFEST",
    "UnknownMethodError",
    "compressed_dir",
    "calibration_windows",
    "build_recipe",
    "layer_outlier_ratios",
    "compress_model",
    "nm_pattern_ok",
    "check_sparsity",
    "check_quant_grid",
    "apply_cpu_workaround",
    "quiet_llmcompressor",
]

MANIFEST = "tlgeo_compression.json"

# Linear layers left alone by every method (the tied embedding / unembedding).
IGNORE = ["re:.*lm_head"]  # a bare "lm_head" does not match in the pruning modifiers


def compressed_dir(model: str, method: str, root: str | os.PathLike | None = None) -> Path:
    """``<root or $TLGEO_CACHE>/compressed/<model>/<method>`` (never inside the repository)."""
    from ..models import cache_dir

    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(model)).strip("_")
    return Path(root) if root is not None else cache_dir() / "compressed" / safe / method


def apply_cpu_workaround() -> None:
    """Make llmcompressor's activation cache usable without an accelerator.

    On a CPU-only machine ``IntermediatesCache.pin_memory`` calls
    ``Tensor.pin_memory()``, which fails with "Cannot access accelerator device"
    (pinning is only useful for host-to-GPU copies). With CUDA available the
    original method is kept.
    """
    if torch.cuda.is_available():
        return
    from llmcompressor.pipelines.cache import IntermediatesCache

    IntermediatesCache.pin_memory = lambda self, *a, **k: None  # no-op: nothing to pin on CPU


def quiet_llmcompressor(verbose: bool = False) -> None:
    """llmcompressor's console log (loguru, INFO and per-layer METRIC lines by default: hundreds
    of lines per model) at WARNING, on stderr, unless ``verbose`` (its INFO default, on stdout).
    The ``LLM_COMPRESSOR_LOG_*`` environment variables still win, as in llmcompressor."""
    import sys

    from llmcompressor.logger import LoggerConfig, configure_logger

    if verbose:
        configure_logger(LoggerConfig(console_log_level="INFO"))
        return
    configure_logger(LoggerConfig(console_log_level=None))  # its handlers removed, none added
    if os.getenv("LLM_COMPRESSOR_LOG_LEVEL") is not None or os.getenv("LLM_COMPRESSOR_LOG_DISABLED") is not None:
        return
    from loguru import logger

    logger.add(
        sys.stderr,
        level="WARNING",
        format="llmcompressor {level}: {message}",
        filter=lambda r: r["level"].name != "METRIC",
    )


def calibration_windows(tokenizer, corpus: str = "wikitext2-valid", n: int = 32, seq_len: int = 128) -> list[list[int]]:
    """``n`` disjoint windows of ``seq_len`` token ids (BOS first when the tokenizer has one).

    The default corpus is the WikiText-2 *validation* split, disjoint from the
    test text that perplexity and the diagnosis read.
    """
    from ..data import load_text

    if n < 1 or seq_len < 2:
        raise InputError(f"need n >= 1 and seq_len >= 2, got n={n}, seq_len={seq_len}")
    bos = tokenizer.bos_token_id
    body = seq_len - (bos is not None)
    text = load_text(corpus, max_chars=16 * n * seq_len + 4096)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) < n * body:
        raise InputError(f"corpus {corpus!r} has {len(ids)} tokens, fewer than {n} x {body}")
    return [([bos] if bos is not None else []) + ids[i * body : (i + 1) * body] for i in range(n)]


def _spec(method: str | MethodSpec, group_size: int = 64, perp_lambda: float = 0.0) -> MethodSpec:
    return method if isinstance(method, MethodSpec) else parse_method(method, group_size, perp_lambda)


def build_recipe(
    method: str | MethodSpec,
    group_size: int = 64,
    perp_lambda: float = 0.0,
    awq_n_grid: int = 20,
    *,
    layer_sparsity: list[float] | None = None,
    layer_class: str | None = None,
    refit_iters: int = 12,
    max_iso_increase: float = 0.0,
):
    """The llmcompressor modifier list for ``method`` (``awq_n_grid``: AWQ's scale-search grid,
    llmcompressor's default 20). ``owl`` / ``perpalloc`` need ``layer_sparsity`` (one per
    decoder layer, of class ``layer_class``)."""
    spec = _spec(method, group_size, perp_lambda)
    if spec.quantizes:
        from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
        from llmcompressor.modifiers.quantization import QuantizationModifier

        weights = QuantizationArgs(
            num_bits=spec.bits, type="int", strategy="group", group_size=spec.group_size, symmetric=False, dynamic=False
        )
        quant = QuantizationModifier(
            config_groups={"group_0": QuantizationScheme(targets=["Linear"], weights=weights)}, ignore=IGNORE
        )
        if spec.family == "rtn":
            return [quant]
        if spec.perp:
            from .perp_awq import PerpAWQModifier

            return [PerpAWQModifier(n_grid=awq_n_grid, perp_lambda=spec.lam), quant]
        from llmcompressor.modifiers.transform.awq import AWQModifier

        return [AWQModifier(n_grid=awq_n_grid), quant]
    prune = dict(sparsity=spec.sparsity, mask_structure=spec.mask_structure, targets=["Linear"], ignore=IGNORE)
    if spec.family in ("owl", "perpalloc"):
        if layer_sparsity is None or layer_class is None:
            raise InputError(f"{spec.name!r} needs per-layer sparsities and the decoder layer class")
        prune.update(sparsity=[float(x) for x in layer_sparsity], targets=[layer_class])
    if spec.family == "sgpt":
        if spec.perp:
            from .perp_sparsegpt import PerpSparseGPTModifier

            return [
                PerpSparseGPTModifier(
                    **prune, perp_lambda=spec.lam, refit_iters=refit_iters, max_iso_increase=max_iso_increase
                )
            ]
        from llmcompressor.modifiers.pruning.sparsegpt import SparseGPTModifier

        return [SparseGPTModifier(**prune)]
    if spec.perp:
        from .perp_wanda import PerpWandaPruningModifier

        return [PerpWandaPruningModifier(**prune, perp_lambda=spec.lam)]
    from llmcompressor.modifiers.pruning.wanda import WandaPruningModifier

    return [WandaPruningModifier(**prune)]


@torch.no_grad()
def layer_outlier_ratios(hf: torch.nn.Module, calib: list[list[int]], m: float = 5.0, batch: int = 8) -> list[float]:
    """OWL's outlier ratio (:func:`tlgeo.compression.allocation.outlier_ratio`) of every
    decoder layer of the dense ``hf`` on the calibration windows: Wanda scores
    ``|W_ij| ||X_j||`` with ``||X_j||`` over all calibration tokens."""
    from .allocation import outlier_ratio
    from .counterfactual import _layers

    layers = _layers(hf)
    sq: dict[torch.nn.Module, Tensor] = {}
    hooks = []
    for layer in layers:
        for mod in layer.modules():
            if isinstance(mod, torch.nn.Linear):

                def pre(mod, args):
                    x = args[0].detach().float().reshape(-1, args[0].shape[-1])
                    sq[mod] = sq.get(mod, 0) + x.pow(2).sum(0)

                hooks.append(mod.register_forward_pre_hook(pre))
    try:
        dev = next(hf.parameters()).device
        for i in range(0, len(calib), batch):
            hf(input_ids=torch.tensor(calib[i : i + batch], device=dev), use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    return [
        outlier_ratio(
            [
                mod.weight.detach().float().abs() * sq[mod].sqrt()[None, :]
                for mod in layer.modules()
                if isinstance(mod, torch.nn.Linear)
            ],
            m,
        )
        for layer in layers
    ]


def nm_pattern_ok(w: Tensor, n_keep: int, m: int) -> bool:
    """Whether every row of ``w`` ``[out, in]`` keeps at most ``n_keep`` non-zeros per
    consecutive group of ``m`` input columns (``in`` divisible by ``m``)."""
    out, inp = w.shape
    if inp % m:
        return False
    nz = (w.reshape(out, inp // m, m) != 0).sum(-1)
    return bool((nz <= n_keep).all())


def check_sparsity(
    state: dict[str, Tensor], spec: MethodSpec, names: list[str], layer_sparsity: list[float] | None = None
) -> dict:
    """Sparsity of each pruned weight and whether the method's pattern holds (N:M per
    group of M; otherwise at least the layer's sparsity, less one weight per row: Wanda
    prunes ``floor(sparsity * in)`` per row).

    Returns ``{"sparsity_min", "sparsity_max", "sparsity_mean", "pattern_ok", "n_weights"}``.
    """
    fr = {k: float((state[k] == 0).float().mean()) for k in names}
    if spec.mask_structure not in ("", "0:0"):
        n_prune, m = (int(x) for x in spec.mask_structure.split(":"))
        ok = all(nm_pattern_ok(state[k], m - n_prune, m) for k in names)
    else:

        def target(k):
            hit = re.search(r"layers\.(\d+)\.", k)
            return layer_sparsity[int(hit.group(1))] if layer_sparsity is not None and hit else spec.sparsity

        ok = all(v >= target(k) - 1.0 / state[k].shape[1] - 1e-6 for k, v in fr.items())
    vals = list(fr.values())
    return {
        "sparsity_min": min(vals),
        "sparsity_max": max(vals),
        "sparsity_mean": sum(vals) / len(vals),
        "pattern_ok": bool(ok),
        "n_weights": len(vals),
    }


def check_quant_grid(w: Tensor, scale: Tensor, zero_point: Tensor, group_size: int, bits: int = 4) -> dict:
    """Whether ``w`` ``[out, in]`` lies on the asymmetric grid ``(q - zp) * scale``,
    ``q`` an integer in compressed-tensors' signed range ``[-2**(bits-1), 2**(bits-1) - 1]``
    (zero point in the same range), per row and group of ``group_size`` columns.

    Returns the largest distance to the grid (in units of ``scale``), whether every
    ``q`` is in range, and the largest number of distinct values in one group
    (``<= 2**bits`` on a valid grid).
    """
    out, inp = w.shape
    if inp % group_size:
        raise InputError(f"input width {inp} is not a multiple of the group size {group_size}")
    wg = w.double().reshape(out, inp // group_size, group_size)
    s = scale.double().reshape(out, inp // group_size, 1)
    z = zero_point.double().reshape(out, inp // group_size, 1)
    q = wg / s + z
    off = (q - q.round()).abs().max().item()
    qr = q.round()
    distinct = max(len(torch.unique(g)) for g in wg.reshape(-1, group_size)[:: max(1, out // 8)])
    return {
        "grid_max_offset": off,
        "q_in_range": bool(((qr >= -(2 ** (bits - 1))) & (qr <= 2 ** (bits - 1) - 1)).all()),
        "max_distinct_per_group": int(distinct),
        "grid_ok": bool(
            off < 1e-3 and distinct <= 2**bits and ((qr >= -(2 ** (bits - 1))) & (qr <= 2 ** (bits - 1) - 1)).all()
        ),
    }


def _dense_state(model, spec: MethodSpec, layer_sparsity: list[float] | None = None) -> tuple[dict[str, Tensor], dict]:
    """Fake-quantised / pruned float32 weights of an llmcompressor-processed model, plus checks."""
    state, checks, quantized = {}, {}, []
    if spec.quantizes:
        from compressed_tensors.quantization.lifecycle.forward import fake_quantize

        for name, mod in model.named_modules():
            scheme = getattr(mod, "quantization_scheme", None)
            if scheme is None or scheme.weights is None or not hasattr(mod, "weight_scale"):
                continue
            args = scheme.weights
            w = fake_quantize(mod.weight.data.float(), mod.weight_scale.data.float(), mod.weight_zero_point.data, args)
            state[name + ".weight"] = w
            c = check_quant_grid(
                w, mod.weight_scale.data.float(), mod.weight_zero_point.data.float(), args.group_size, args.num_bits
            )
            quantized.append(c)
        checks = {
            "n_quantized": len(quantized),
            "grid_ok": all(c["grid_ok"] for c in quantized) and bool(quantized),
            "q_in_range": all(c["q_in_range"] for c in quantized),
            "grid_max_offset": max((c["grid_max_offset"] for c in quantized), default=None),
            "max_distinct_per_group": max((c["max_distinct_per_group"] for c in quantized), default=None),
        }
    skip = re.compile(r"\.(weight_scale|weight_zero_point|weight_g_idx|weight_global_scale)$")
    for k, v in model.state_dict().items():
        if k not in state and not skip.search(k):
            state[k] = v.detach().float().clone()
    if not spec.quantizes:
        names = [
            n + ".weight" for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and "lm_head" not in n
        ]
        checks = check_sparsity(state, spec, names, layer_sparsity)
    emb = [k for k in state if k.endswith("embed_tokens.weight")]
    # the (tied) embedding / unembedding must come out untouched
    checks["embedding_sparsity"] = float((state[emb[0]] == 0).float().mean()) if emb else None
    return state, checks


def _load(model_dir: Path, spec: MethodSpec, sensitivity: list[float] | None, calib: list[list[int]], device: str):
    """Check the model folder, the method's inputs and the calibration windows, then load the tokenizer and the
    float32 model onto ``device``: ``(oneshot, tokenizer, model, its decoder layers, seq_len)``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .counterfactual import _layers

    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"{model_dir} is not a Hugging Face model directory (no config.json)")
    if spec.family == "perpalloc" and sensitivity is None:
        raise InputError(f"{spec.name!r} needs the per-layer sensitivity of a uniformly pruned model")
    from llmcompressor import oneshot

    apply_cpu_workaround()
    lens = {len(c) for c in calib}
    if len(lens) != 1:
        raise InputError(f"calibration windows must have equal lengths, got {sorted(lens)}")
    seq_len = lens.pop()
    tok = AutoTokenizer.from_pretrained(model_dir)
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if device != "cpu":
        hf = hf.to(device) if device != "auto" else hf
    return oneshot, tok, hf, _layers(hf), seq_len


def _layer_allocation(
    hf,
    spec: MethodSpec,
    n_layers: int,
    calib: list[list[int]],
    sensitivity: list[float] | None,
    owl_m: float,
    alloc_spread: float,
) -> tuple[list[float] | None, list[float] | None]:
    """``(layer_sparsity, scores)`` of a per-layer allocation (``owl``, ``perpalloc``); ``(None, None)`` otherwise."""
    from .allocation import allocate_sparsity

    if spec.family not in ("owl", "perpalloc"):
        return None, None
    scores = layer_outlier_ratios(hf, calib, owl_m) if spec.family == "owl" else [float(x) for x in sensitivity]
    if len(scores) != n_layers:
        raise InputError(f"{len(scores)} per-layer scores for a model with {n_layers} decoder layers")
    return allocate_sparsity(scores, spec.sparsity, alloc_spread).tolist(), scores


def _oneshot(oneshot, hf, ds, recipe, n_calib: int, seq_len: int, pipeline: str) -> None:
    """Calibrate and compress ``hf`` in place with llmcompressor's ``oneshot`` on ``ds``, in this process only."""
    from compressed_tensors.offload.utils import as_single_threaded

    # one process compresses the whole model: under torchrun (a data-parallel analysis) llmcompressor
    # would otherwise split the calibration and wait on the other ranks, which compress other models
    with as_single_threaded():
        oneshot(
            model=hf,
            dataset=ds,
            recipe=recipe,
            num_calibration_samples=n_calib,
            max_seq_length=seq_len,
            shuffle_calibration_samples=False,
            pipeline=pipeline,
        )


def _manifest(
    spec: MethodSpec,
    layer_sparsity: list[float] | None,
    refit: list,
    *,
    scores: list[float] | None,
    checks: dict,
    seconds: float,
    model_dir: Path,
    n_calib: int,
    seq_len: int,
    awq_n_grid: int,
    alloc_spread: float,
    refit_iters: int,
    max_iso_increase: float,
    device: str,
    pipeline: str,
    extra: dict | None,
) -> dict:
    """The manifest of a compressed model: the method, its settings, the calibration, timing and checks
    (``extra`` merged last)."""
    return {
        "method": spec.name,
        "kind": spec.kind,
        "spec": spec.to_dict(),
        "sparsity": spec.sparsity,
        "mask_structure": spec.mask_structure,
        "bits": spec.bits,
        "group_size": spec.group_size,
        "awq_n_grid": awq_n_grid if spec.family == "awq" else None,
        "perp_lambda": spec.lam if spec.perp else None,
        "layer_sparsity": layer_sparsity,
        "allocation_scores": scores,
        "alloc_spread": alloc_spread if layer_sparsity is not None else None,
        "refit_iters": refit_iters if refit else None,
        "max_iso_increase": max_iso_increase if refit else None,
        "refit": refit or None,
        "base": str(model_dir),
        "n_calib": n_calib,
        "calib_seq_len": seq_len,
        "seconds": seconds,
        "device": device,
        "pipeline": pipeline,
        "checks": checks,
        **(extra or {}),
    }


def _save_compressed(model_dir: Path, state: dict[str, Tensor], tok, manifest: dict, out_dir: Path) -> None:
    """Write the dense model with ``state``, its tokenizer and ``manifest`` to ``out_dir``, sealed and atomically."""
    from transformers import AutoModelForCausalLM

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out_dir.name + ".", dir=out_dir.parent))
    try:
        dense = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        missing, unexpected = dense.load_state_dict(state, strict=False)
        missing = [k for k in missing if not k.endswith("lm_head.weight")]  # tied to the embedding
        if missing or unexpected:
            raise RuntimeError(f"state mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")
        save_local(dense, tmp)
        tok.save_pretrained(tmp)
        write_json(tmp / MANIFEST, manifest, indent=2)
        seal(tmp)  # load_model checks a sealed folder before it boots it
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def compress_model(
    model_dir: str | os.PathLike,
    method: str | MethodSpec,
    out_dir: str | os.PathLike,
    *,
    calib: list[list[int]],
    group_size: int = 64,
    perp_lambda: float = 0.0,
    device: str = "cpu",
    pipeline: str = "sequential",
    awq_n_grid: int = 20,
    sensitivity: list[float] | None = None,
    alloc_spread: float = 0.08,
    owl_m: float = 5.0,
    refit_iters: int = 12,
    max_iso_increase: float = 0.0,
    extra: dict | None = None,
) -> dict:
    """Compress the HF model in ``model_dir`` with ``method`` and save it densely to ``out_dir``.

    ``calib``: calibration token windows (equal lengths). ``device``: ``"cpu"`` or a
    CUDA device; with ``"auto"`` / several GPUs llmcompressor's sequential pipeline
    onloads one layer at a time onto the first GPU. Returns the manifest (also
    written to ``out_dir/tlgeo_compression.json``). Writes atomically: an interrupted
    run leaves no half-written ``out_dir``. ``pipeline``: llmcompressor's ``"sequential"``
    (each block calibrated on the outputs of the already compressed blocks before it;
    needed by AWQ) or ``"basic"`` (one calibration pass of the dense model, then every
    layer is pruned; several times faster for Wanda on a loaded CPU).

    Per-layer allocations (``owl``, ``perpalloc``) spread the sparsity by ``alloc_spread``
    (OWL's lambda) around the target: ``owl`` from the dense model's outlier ratios
    (``owl_m``, OWL's M), ``perpalloc`` from ``sensitivity`` (one number per layer, e.g.
    :func:`tlgeo.compression.allocation.perp_sensitivity` of a uniform model's diagnosis).
    The time to compute the OWL ratios is part of ``seconds``.
    """
    from datasets import Dataset

    spec = _spec(method, group_size, perp_lambda)
    model_dir = Path(model_dir)
    oneshot, tok, hf, decoder_layers, seq_len = _load(model_dir, spec, sensitivity, calib, device)
    ds = Dataset.from_dict({"input_ids": calib, "attention_mask": [[1] * seq_len for _ in calib]})
    t0 = time.perf_counter()
    layer_sparsity, scores = _layer_allocation(hf, spec, len(decoder_layers), calib, sensitivity, owl_m, alloc_spread)
    recipe = build_recipe(
        spec,
        group_size,
        perp_lambda,
        awq_n_grid,
        layer_sparsity=layer_sparsity,
        layer_class=type(decoder_layers[0]).__name__,
        refit_iters=refit_iters,
        max_iso_increase=max_iso_increase,
    )
    _oneshot(oneshot, hf, ds, recipe, len(calib), seq_len, pipeline)
    seconds = time.perf_counter() - t0
    refit = [row for mod in recipe for row in getattr(mod, "refit_log", [])]
    state, checks = _dense_state(hf.to("cpu"), spec, layer_sparsity)
    del hf
    manifest = _manifest(
        spec,
        layer_sparsity,
        refit,
        awq_n_grid=awq_n_grid,
        scores=scores,
        alloc_spread=alloc_spread,
        refit_iters=refit_iters,
        max_iso_increase=max_iso_increase,
        model_dir=model_dir,
        n_calib=len(calib),
        seq_len=seq_len,
        seconds=seconds,
        device=device,
        pipeline=pipeline,
        checks=checks,
        extra=extra,
    )
    _save_compressed(model_dir, state, tok, manifest, Path(out_dir))
    return manifest
