"""``tlgeo compress``: compress a model with llmcompressor, then evaluate perplexity / zero-shot accuracy.

:func:`run_compress` is the command's entry point (``scripts/compress.py`` calls the command).
Compressed models go to ``<root>/<method>`` (default ``$TLGEO_CACHE/compressed/<model>``, never
the repository); each holds a manifest (:data:`~tlgeo.compression.llmc.MANIFEST`) with the
settings it was made with. A method whose directory already holds a manifest is reused only
if its settings are the ones asked for (:func:`manifest_differences`); otherwise the run stops
and names them (``force`` recompresses). A manifest made with other compression code or
another llmcompressor version is reused with a printed warning.

The evaluations go to ``out`` (default ``runs/compression/<model>``): ``ppl.jsonl`` (key:
method, corpus, tokens, context), ``zeroshot.jsonl`` (task, limit, method), their CSVs, and
``models.json``: the model each method's rows were computed on (:func:`model_id`). A rerun
skips rows already there; rows made on another model than the one now under the method's
directory (recompressed since) stop the run, never reused. ``compress_log.jsonl`` gets one
manifest per compression.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Callable, Sequence

from ..errors import InputError
from ..models import Model, save_local
from ..storage import append_lines, write_csv, write_json
from .config import CompressConfig
from .llmc import MANIFEST, calibration_windows, compress_model, compressed_dir, quiet_llmcompressor

__all__ = [
    "base_dir",
    "base_key",
    "compressed_root",
    "sensitivity",
    "expected_manifest",
    "manifest_differences",
    "code_fingerprint",
    "model_id",
    "compress_methods",
    "evaluate_methods",
    "run_compress",
    "export_dense",
    "weights_fingerprint",
    "ensure_compressed",
    "MODELS",
]

MODELS = "models.json"  # in out: the model id each method's ppl / zero-shot rows were computed on
CODE_FILES = (
    "methods.py",
    "llmc.py",
    "perp_awq.py",
    "perp_wanda.py",
    "perp_sparsegpt.py",
    "allocation.py",
    "reconstruct.py",
    "decompose.py",
)


def base_dir(model: str) -> Path:
    """The Hugging Face directory of ``model``: an embedded model's converted copy or a local directory."""
    from ..models import EMBEDDED_MODELS, embedded_model_dir

    if model in EMBEDDED_MODELS:
        return embedded_model_dir(model)
    p = Path(model).expanduser()
    if not (p / "config.json").is_file():
        raise FileNotFoundError(f"{model!r} is neither an embedded model nor a local HF model directory")
    return p


def base_key(model: str) -> str:
    """``model`` as a folder name: a directory's name, else the name with ``:`` as ``-``."""
    return Path(model).name if Path(model).expanduser().is_dir() else model.replace(":", "-")


def compressed_root(model: str, root: str | os.PathLike | None = None) -> Path:
    """``root``, or ``$TLGEO_CACHE/compressed/<model key>``: the parent of the ``<method>/`` dirs."""
    return Path(root) if root else compressed_dir(base_key(model), "x").parent


def sensitivity(cfg: CompressConfig, spec) -> list[float]:
    """Per-layer local block e_perp of the uniform model of ``spec``'s sparsity (``perpalloc``)."""
    import pandas as pd

    from .allocation import perp_sensitivity

    if not cfg.sensitivity_from:
        raise InputError(
            f"{spec.name}: pass --sensitivity-from DIAG_LAYERS_CSV (tlgeo compression of the uniform model)"
        )
    method = cfg.sensitivity_method or f"wanda_s{round(100 * spec.sparsity)}"
    layers = pd.read_csv(cfg.sensitivity_from)
    if method not in set(layers["method"]) and method == "wanda_s50":
        method = "wanda"  # the same model under its short name
    return perp_sensitivity(layers, method).tolist()


def code_fingerprint() -> str:
    """A hash of the compression code that makes the weights (:data:`CODE_FILES`)."""
    h = hashlib.sha256()
    here = Path(__file__).parent
    for name in CODE_FILES:
        h.update(name.encode() + b"\0" + (here / name).read_bytes())
    return h.hexdigest()[:16]


def _llmcompressor_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llmcompressor")
    except PackageNotFoundError:
        return None


def expected_manifest(method: str, cfg: CompressConfig, base: str, sens: list[float] | None = None) -> dict:
    """The manifest entries that a model of ``method`` made with ``cfg`` from ``base`` must have
    (the settings that change its weights)."""
    spec = cfg.spec(method)
    out = {
        "spec": spec.to_dict(),
        "n_calib": cfg.n_calib,
        "calib_seq_len": cfg.calib_seq_len,
        "calib_corpus": cfg.calib_corpus,
        "device": cfg.device,
        "pipeline": cfg.pipeline_of(method),
        "base": base,
    }
    if spec.family == "awq":
        out["awq_n_grid"] = cfg.awq_grid
    if spec.family in ("owl", "perpalloc"):
        out["alloc_spread"] = cfg.alloc_spread
    if spec.family == "owl":
        out["owl_m"] = cfg.owl_m
    if spec.family == "perpalloc" and sens is not None:
        out["allocation_scores"] = [float(x) for x in sens]
    if spec.family == "sgpt" and spec.perp:
        out["refit_iters"] = cfg.refit_iters
        out["max_iso_increase"] = cfg.max_iso_increase
    return out


def manifest_differences(manifest: dict, expected: dict) -> list[str]:
    """``"name: had -> wanted"`` for every expected entry the manifest lacks or holds otherwise."""
    missing = "(not recorded)"
    return [
        f"{k}: {manifest.get(k, missing)!r} -> {v!r}"
        for k, v in expected.items()
        if json.dumps(manifest.get(k, missing), sort_keys=True) != json.dumps(v, sort_keys=True)
    ]


def _code_differences(manifest: dict) -> list[str]:
    now = {"code": code_fingerprint(), "llmcompressor": _llmcompressor_version()}
    return [f"{k} {manifest.get(k, '(not recorded)')} (now {v})" for k, v in now.items() if manifest.get(k) != v]


def model_id(model_dir: str | os.PathLike) -> str:
    """An id of the model in ``model_dir``: a hash of its manifest (a compressed model: every
    recompression changes it) or of its config and its weight files' sizes and modification
    times (a model made otherwise: edited in place, it changes)."""
    d = Path(model_dir)
    h = hashlib.sha256()
    if (d / MANIFEST).is_file():
        h.update((d / MANIFEST).read_bytes())
    else:
        h.update((d / "config.json").read_bytes())
        for p in sorted(d.glob("*.safetensors")) + sorted(d.glob("*.bin")):
            h.update(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def _reusable(target: Path, expected: dict, force: bool, log: Callable[[str], None]) -> bool:
    """Whether ``target`` holds a model made with ``expected``; raises if it holds another one
    (unless ``force``: then it is recompressed)."""
    if not (target / MANIFEST).is_file() or force:
        return False
    man = json.loads((target / MANIFEST).read_text())
    diff = manifest_differences(man, expected)
    if diff:
        raise InputError(
            f"{target} was compressed with other settings ({'; '.join(diff)}); pass --force to "
            "recompress it or --root for another folder"
        )
    code = _code_differences(man)
    if code:
        log(f"[{target.name}] warning: reusing a model made with other code: {'; '.join(code)} (--force recompresses)")
    return True


def compress_methods(
    model: str, cfg: CompressConfig, out: Path | None = None, *, log: Callable[[str], None] = print
) -> dict[str, dict]:
    """Compress every method of ``cfg`` from ``model`` (an embedded name or an HF directory) into
    its root; returns the manifests of the methods compressed now. With ``out``, each manifest
    is appended to ``out/compress_log.jsonl``."""
    from transformers import AutoTokenizer

    src = base_dir(model)
    root = compressed_root(model, cfg.root)
    calib = None
    done = {}
    for m in cfg.methods:
        spec = cfg.spec(m)
        target = root / m
        # perpalloc's sensitivities are checked when given (they are needed to compress it)
        sens = None
        if spec.family == "perpalloc" and (cfg.sensitivity_from or cfg.force or not (target / MANIFEST).is_file()):
            sens = sensitivity(cfg, spec)
        if _reusable(target, expected_manifest(m, cfg, str(src), sens), cfg.force, log):
            log(f"[{m}] already compressed in {target}, skipping")
            continue
        if calib is None:
            calib = calibration_windows(
                AutoTokenizer.from_pretrained(src), cfg.calib_corpus, cfg.n_calib, cfg.calib_seq_len
            )
        t0 = time.time()
        man = compress_model(
            src,
            spec,
            target,
            calib=calib,
            device=cfg.device,
            pipeline=cfg.pipeline_of(m),
            awq_n_grid=cfg.awq_grid,
            sensitivity=sens,
            alloc_spread=cfg.alloc_spread,
            owl_m=cfg.owl_m,
            refit_iters=cfg.refit_iters,
            max_iso_increase=cfg.max_iso_increase,
            extra=_extra(cfg, spec),
        )
        log(f"[{m}] {time.time() - t0:.0f} s -> {target}\n  checks: {json.dumps(man['checks'])}")
        if out is not None:
            append_lines(out / "compress_log.jsonl", [json.dumps(man)])
        done[m] = man
    return done


def _extra(cfg: CompressConfig, spec, **more) -> dict:
    extra = {"calib_corpus": cfg.calib_corpus, "code": code_fingerprint(), "llmcompressor": _llmcompressor_version()}
    if spec.family == "owl":
        extra["owl_m"] = cfg.owl_m
    return {**extra, **more}


def _bind_models(out: Path, dirs: dict[str, Path], logged: set[str]) -> None:
    """Record in ``out/models.json`` the model of each method in ``dirs``; raise if ``out``
    holds rows of a method made on another model (or on an unrecorded one)."""
    path = out / MODELS
    ids = json.loads(path.read_text()) if path.is_file() else {}
    for m, d in dirs.items():
        now = model_id(d)
        if m in ids and ids[m] != now:
            raise InputError(
                f"{out} holds perplexity / zero-shot results of {m!r} made on another model than the one "
                f"now in {d} (recompressed or changed since); use another --out or delete them"
            )
        if m not in ids and m in logged:
            raise InputError(
                f"{out} holds perplexity / zero-shot results of {m!r} from a run that did not record its "
                f"model ({MODELS}); use another --out or delete them"
            )
        ids[m] = now
    write_json(path, ids, indent=1, sort_keys=True)


def evaluate_methods(model: str, cfg: CompressConfig, out: Path, *, log: Callable[[str], None] = print) -> list[Path]:
    """Perplexity (``cfg.ppl``) and zero-shot accuracy (``cfg.zeroshot_tasks``) of the base and
    of every compressed method, logged in ``out``; returns the tables written."""
    from ..data import load_text
    from ..evals.perplexity import perplexity
    from ..evals.zeroshot import LOG_KEY, evaluate_zeroshot
    from ..models import load_model
    from ..runner.identity import run_identity
    from ..runner.results import ResultLog

    src = base_dir(model)
    root = compressed_root(model, cfg.root)
    # keyed by method: models.json binds each method to its weights (_bind_models); each row records the
    # identity of the model it measured
    plog = ResultLog(out / "ppl.jsonl", ("method", "corpus", "tokens", "context"), identity={})
    zpath = out / "zeroshot.jsonl"
    zlog = ResultLog(zpath, LOG_KEY, identity={}) if zpath.exists() else None
    dirs = {}
    for m in ["base", *cfg.methods]:
        d = src if m == "base" else root / m
        if not (d / "config.json").is_file():
            log(f"[{m}] no compressed model at {d}; skipped")
            continue
        dirs[m] = d
    logged = {r["method"] for r in plog.rows} | ({r["tag"] for r in zlog.rows} if zlog is not None else set())
    _bind_models(out, dirs, logged)
    text = load_text(cfg.ppl_corpus) if cfg.ppl else ""
    for m, d in dirs.items():
        key = {"method": m, "corpus": cfg.ppl_corpus, "tokens": cfg.ppl_tokens, "context": cfg.context}
        need_ppl = cfg.ppl and not plog.done(**key)
        if not need_ppl and not cfg.zeroshot_tasks:
            continue
        bridge = load_model(str(d))
        if need_ppl:
            t0 = time.time()
            r = perplexity(bridge, text, context=cfg.context, max_tokens=cfg.ppl_tokens)
            plog.add({**run_identity(bridge).row(), **key, **r.to_dict(), "seconds": time.time() - t0})
            log(f"[{m}] ppl {r.ppl:.3f}")
        if cfg.zeroshot_tasks:
            zs = evaluate_zeroshot(bridge, list(cfg.zeroshot_tasks), limit=cfg.zeroshot_limit, log_path=zpath, tag=m)
            log(zs[["task", "n", "acc", "acc_norm"]].assign(method=m).to_string(index=False))
        del bridge
    written = []
    ppl = plog.frame()
    if len(ppl):
        write_csv(out / "ppl.csv", ppl)
        written.append(out / "ppl.csv")
    if cfg.zeroshot_tasks and zpath.exists():
        zs = ResultLog(zpath, LOG_KEY, identity={}).frame().drop(columns=["items"])  # every method's rows
        write_csv(out / "zeroshot.csv", zs.rename(columns={"tag": "method"}))
        written.append(out / "zeroshot.csv")
    return written


def run_compress(
    model: str,
    cfg: CompressConfig,
    out: str | os.PathLike,
    *,
    verbose: bool = False,
    log: Callable[[str], None] = print,
) -> list[Path]:
    """``tlgeo compress``: compress (``cfg.compress``), then evaluate (``cfg.ppl``, ``cfg.zeroshot_tasks``).
    llmcompressor logs at WARNING unless ``verbose``. Returns the files written in ``out``."""
    out = Path(out)
    base_dir(model)  # an unknown model fails before any work
    written: list[Path] = []
    if cfg.compress:
        quiet_llmcompressor(verbose)
        if compress_methods(model, cfg, out, log=log):
            written.append(out / "compress_log.jsonl")
    if cfg.ppl or cfg.zeroshot_tasks:
        out.mkdir(parents=True, exist_ok=True)
        written += evaluate_methods(model, cfg, out, log=log)
        written.append(out / MODELS)
    return written


# ---------------------------------------------------------------------------
# compression on the fly, for the diagnosis of a loaded model
# ---------------------------------------------------------------------------


def export_dense(model: Model, path: str | os.PathLike) -> Path:
    """Write the Hugging Face model inside a bridge (its raw weights, untouched) and its
    tokenizer to ``path`` as an ordinary model directory."""
    import torch
    from transformers import AutoModelForCausalLM

    from .counterfactual import hf_model

    hf = hf_model(model)
    state = dense_state(model)
    config = copy.deepcopy(hf.config)
    config.output_attentions = False  # the bridge asks for attention patterns; a saved model does not
    config.output_hidden_states = False
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    want = fresh.state_dict()
    missing = [k for k in want if k not in state]
    if missing:
        raise InputError(f"cannot export the model: no weights for {missing[:5]}")
    fresh.load_state_dict({k: state[k].detach().to(torch.float32).cpu() for k in want})
    path = Path(path)
    save_local(fresh, path)
    model.tokenizer.save_pretrained(path)
    return path


def _plain(key: str) -> str:
    return key.replace("_original_component.", "")


def dense_state(model: Model) -> dict:
    """The weights inside a bridge by their Hugging Face names; those a sharded model offloaded
    (to CPU or disk, on the meta device until their module runs) are read back from the offload."""
    from .counterfactual import hf_model

    hf = hf_model(model)
    state = hf.state_dict(keep_vars=True)
    if any(v.device.type == "meta" for v in state.values()):
        import logging

        from accelerate.utils.modeling import get_state_dict_offloaded_model

        log = logging.getLogger("accelerate.utils.modeling")
        level, log.level = log.level, logging.ERROR  # not its warning about the bridge's alias names
        try:
            loaded = get_state_dict_offloaded_model(hf)  # each module's own names, read from the offload
        finally:
            log.setLevel(level)
        names: dict[int, list[str]] = {}  # the bridge reaches one weight by several names
        for k, v in state.items():
            names.setdefault(id(v), []).append(k)
        for aliases in names.values():
            value = next((loaded[k] for k in aliases if k in loaded), None)
            if value is not None:
                loaded.update({k: value for k in aliases if k not in loaded})
        state = loaded
    return {_plain(k): v.detach() for k, v in state.items()}


def weights_fingerprint(model: Model) -> str:
    """A hash of the dense weights inside a bridge (names, shapes, values); a tied weight counts
    once, whether the model is sharded or not."""
    import torch

    from .counterfactual import hf_model

    h = hashlib.sha256()
    state = dense_state(model)
    owner = {_plain(k): id(v) for k, v in hf_model(model).state_dict(keep_vars=True).items()}  # tied: one object
    seen = set()
    for k in sorted(state):
        v = state[k]
        alias = owner.get(k, id(v))
        if alias in seen and v.numel():  # a tied weight already hashed
            continue
        seen.add(alias)
        t = v.detach().to(torch.float32).cpu().contiguous()
        h.update(f"{k}:{tuple(t.shape)}".encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()[:16]


def ensure_compressed(
    model: Model, methods: Sequence[str], root: Path, cfg: CompressConfig, *, log: Callable[[str], None] = print
) -> None:
    """Compress each of ``methods`` whose folder under ``root`` is missing, from the dense weights
    of the loaded ``model`` (a manifest records their fingerprint). A folder made here earlier with
    other settings, from other weights or with other code is recompressed; a folder made otherwise
    (``tlgeo compress``) with other settings is an error; a folder without a manifest is used as it is."""
    import tempfile

    todo, fingerprint = [], None
    for m in methods:
        target = root / m
        if (target / "config.json").is_file() and not (target / MANIFEST).is_file():
            continue
        if fingerprint is None:
            fingerprint = weights_fingerprint(model)
        want = {**expected_manifest(m, cfg, "(exported)"), "base_fingerprint": fingerprint}
        if (target / MANIFEST).is_file():
            man = json.loads((target / MANIFEST).read_text())
            diff = manifest_differences(man, want) + _code_differences(man)
            if not diff:
                continue
            if man.get("made_by") != "compression":
                raise InputError(
                    f"{target} was compressed with other settings ({'; '.join(diff)}); use another root "
                    "or recompress it with tlgeo compress --force"
                )
            log(f"[{m}] recompressing {target}: {'; '.join(diff)}")
        todo.append(m)
    if not todo:
        return
    quiet_llmcompressor(False)
    with tempfile.TemporaryDirectory(prefix="tlgeo-dense-") as tmp:
        src = export_dense(model, Path(tmp) / "dense")
        from transformers import AutoTokenizer

        calib = calibration_windows(
            AutoTokenizer.from_pretrained(src), cfg.calib_corpus, cfg.n_calib, cfg.calib_seq_len
        )
        for m in todo:
            spec = cfg.spec(m)
            if spec.family == "perpalloc":
                raise InputError(
                    f"{m}: perpalloc needs a diagnosis of the uniform model first; compress it with "
                    "tlgeo compress --sensitivity-from"
                )
            t0 = time.time()
            compress_model(
                src,
                spec,
                root / m,
                calib=calib,
                device=cfg.device,
                pipeline=cfg.pipeline_of(m),
                awq_n_grid=cfg.awq_grid,
                alloc_spread=cfg.alloc_spread,
                owl_m=cfg.owl_m,
                refit_iters=cfg.refit_iters,
                max_iso_increase=cfg.max_iso_increase,
                extra=_extra(cfg, spec, base="(exported)", base_fingerprint=fingerprint, made_by="compression"),
            )
            log(f"[{m}] compressed in {time.time() - t0:.1f} s -> {root / m}")
