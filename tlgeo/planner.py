"""What an analysis will cost on a model before it runs, from the model's config alone.

:func:`model_shape` reads a model's shape (a local directory's ``config.json``, a ``config.json``
file, ``tiny:<kind>``, an embedded model, or one of the seed papers' models by hub id from its
published config.json values, :data:`tlgeo.families.checkpoints.SEED_CHECKPOINTS`: no weights,
no network). An analysis that can be planned describes its steps as :class:`Work`: the shape of
its work only (forward tokens, window length, batch, the share of the blocks and of the unembedding
they go through, the hooks it runs, what it keeps on the device and in host memory, and its host
work besides the forwards as amounts of named kinds of work); :func:`estimate` prices them.

Every time comes from one committed table of measurements, :data:`CALIBRATION_FILE`, which
``scripts/bench_plan.py --calibrate`` writes (one row per device, kind of work, dtype and thread
count, naming the machine it was measured on; :func:`calibration`). A forward token costs ``2 x`` the
active non-embedding parameters plus the unembedding, plus attention over the window (FLOPs), at the
table's ``forward.flops`` for the dtype (a GPU: :data:`GPU_EFFICIENCY` of its datasheet's peak, an
assumption), plus ``forward.block`` seconds per block of each forward on a CPU, times ``1 +`` the
step's hooks (each kind the table's share of a bare forward per unit); its host work is its amounts
times the table's seconds per unit, counted the same on every device (the code runs it on the host). A
command's start-up (``start.imports``, ``start.load.<format>`` and ``start.load.<format>.gib``:
:func:`start_seconds`) is part of the table. Peak memory is the weights, one forward's activations
(float32 logits included), what the step keeps, and on CPU the process itself and what the step
keeps in host memory (state pools, CPU copies; on a GPU it is listed beside the peak).
"""

from __future__ import annotations

from .errors import InputError
import csv
import functools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

__all__ = [
    "ModelShape",
    "model_shape",
    "model_format",
    "Device",
    "DEVICES",
    "Work",
    "estimate",
    "start_seconds",
    "Calibration",
    "calibration",
    "CALIBRATION_FILE",
    "MissingCalibration",
    "GPU_EFFICIENCY",
    "CALIBRATION_MODEL",
    "CHARS_PER_TOKEN",
    "text_tokens",
    "padded_batches",
    "windows",
]

GIB = 2**30
GPU_EFFICIENCY = 0.35  # share of peak bf16 FLOP/s a batched forward reaches: an assumption, not measured here
# memory (measured on SmolLM2-135M, float32, by scripts/bench_plan.py --memory, which prints them):
CPU_PROCESS_GIB = 0.57  # resident memory of a command with its model resident, less the weights
ACTIVATION_FLOATS = 12  # float32 values per token and d_model live during one forward, besides d_mlp and the logits
LOGIT_COPIES = 1.7  # [tokens, vocab] float32 arrays a bare forward holds at its peak (1.61-1.72 at 4 x 256 tokens)
PPL_LOGIT_COPIES = 3.6  # the same for a pass that takes log-probabilities (perplexity: 4 x 512 tokens, fresh process)
# texts without a tokenizer: the 281 WikiText sentences of tlgeo dirmag (53,227 characters) are 12,761 SmolLM2
# tokens with BOS, at most 64 each, and their first 64 are 2,906 (RESULTS.md section 2): 12,742 and 2,969 at 4.25
CHARS_PER_TOKEN = 4.25
CALIBRATION_FILE = Path(__file__).with_name("planner_calibration.csv")  # written by scripts/bench_plan.py --calibrate
CALIBRATION_COLUMNS = ("device", "kind", "dtype", "threads", "value", "unit", "machine", "measured", "how")


class MissingCalibration(KeyError):
    """The calibration table has no row for a kind of work the plan needs."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class Calibration:
    """The measured prices of the planner's kinds of work: rows of :data:`CALIBRATION_COLUMNS` (``value``
    a float, ``threads`` an int, ``dtype`` ``any`` where the price does not depend on it)."""

    rows: tuple[Mapping[str, Any], ...]

    @classmethod
    def read(cls, path: str | Path = CALIBRATION_FILE) -> "Calibration":
        with open(path, newline="") as f:
            rows = [dict(r, value=float(r["value"]), threads=int(r["threads"])) for r in csv.DictReader(f)]
        return cls(tuple(rows))

    def write(self, path: str | Path) -> None:
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, CALIBRATION_COLUMNS, lineterminator="\n")
            w.writeheader()
            for r in sorted(self.rows, key=lambda r: (r["device"], r["kind"], r["dtype"], r["threads"])):
                w.writerow({k: (f"{r[k]:.4g}" if k == "value" else r[k]) for k in CALIBRATION_COLUMNS})

    def threads(self, device: str = "cpu") -> list[int]:
        """The thread counts the table holds forwards of, on ``device``."""
        return sorted({r["threads"] for r in self.rows if r["device"] == device and r["kind"] == "forward.flops"})

    def row(self, kind: str, dtype: str = "any", threads: int | None = None, device: str = "cpu") -> Mapping:
        """The row pricing ``kind`` (``a|b``: ``a``'s, else ``b``'s): ``device``'s (else ``cpu``'s), ``dtype``'s
        (else ``any``), at ``threads`` (else the nearest count measured; ``None``: the most)."""
        for name in kind.split("|"):
            for dev, dt in ((v, t) for v in dict.fromkeys((device, "cpu")) for t in dict.fromkeys((dtype, "any"))):
                got = [r for r in self.rows if r["device"] == dev and r["kind"] == name and r["dtype"] == dt]
                if got:
                    want = max(r["threads"] for r in got) if threads is None else threads
                    return min(got, key=lambda r: (abs(r["threads"] - want), -r["threads"]))
        raise MissingCalibration(
            f"the planner's calibration has no {kind!r} ({dtype}, {device}): "
            "scripts/bench_plan.py --calibrate measures it"
        )

    def value(self, kind: str, dtype: str = "any", threads: int | None = None, device: str = "cpu") -> float:
        return float(self.row(kind, dtype, threads, device)["value"])

    def price(self, amounts: Mapping[str, float], threads: int | None = None, device: str = "cpu") -> float:
        """``sum(amount x price)`` over the kinds of ``amounts``."""
        return float(sum(a * self.value(k, threads=threads, device=device) for k, a in amounts.items() if a))

    def machine(self) -> str:
        return "; ".join(dict.fromkeys(r["machine"] for r in self.rows if r["device"] == "cpu"))

    def replace(self, kind: str, value: float, **fields: Any) -> "Calibration":
        """This table with ``kind`` (at ``fields``' device, dtype and threads; by default cpu, any, 1) set to
        ``value``: added, or the matching row replaced."""
        row = {
            "device": "cpu",
            "dtype": "any",
            "threads": 1,
            "unit": "",
            "machine": "",
            "measured": "",
            "how": "",
            **fields,
            "kind": kind,
            "value": float(value),
        }
        same = lambda r: all(r[k] == row[k] for k in ("device", "kind", "dtype", "threads"))  # noqa: E731
        return Calibration((*(r for r in self.rows if not same(r)), row))


@functools.lru_cache(maxsize=4)
def _read(path: str) -> Calibration:
    return Calibration.read(path)


def calibration(path: str | Path | None = None) -> Calibration:
    """The committed calibration table (:data:`CALIBRATION_FILE`), or the one at ``path``."""
    return _read(str(path or CALIBRATION_FILE))


@dataclass(frozen=True)
class ModelShape:
    """A transformer's shape: all the planner needs."""

    name: str
    family: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_mlp: int
    vocab: int
    n_ctx: int
    tied: bool = True
    gated_mlp: bool = True
    n_experts: int = 0  # mixture of experts: experts per layer (0: a dense MLP)
    experts_per_token: int = 0

    @property
    def attn_params(self) -> int:
        return 2 * self.d_model * self.n_heads * self.d_head + 2 * self.d_model * self.n_kv_heads * self.d_head

    def mlp_params(self, experts: int | None = None) -> int:
        one = (3 if self.gated_mlp else 2) * self.d_model * self.d_mlp
        return one * (experts if experts is not None else max(1, self.n_experts))

    @property
    def params(self) -> int:
        """Every weight (embedding and, untied, the unembedding included; norms and biases left out)."""
        emb = self.vocab * self.d_model * (1 if self.tied else 2)
        return emb + self.n_layers * (self.attn_params + self.mlp_params())

    def forward_flops(self, tokens: int, window: int, blocks: float = 1.0, readout: float = 1.0) -> float:
        """FLOPs of a forward over ``tokens`` in windows of ``window`` (causal attention); ``blocks``: the
        share of the blocks each token goes through (a forward resumed at block ``l``: ``(n - l) / n``),
        ``readout``: positions unembedded per token (a forward read out at its last position: ``1 / window``)."""
        active = self.n_layers * (self.attn_params + self.mlp_params(self.experts_per_token or None))
        attention = 2 * self.n_layers * self.n_heads * self.d_head * window
        per_token = blocks * (2 * active + attention) + readout * 2 * self.d_model * self.vocab
        return float(tokens) * per_token

    @classmethod
    def from_hf_config(cls, cfg: Any, name: str = "") -> "ModelShape":
        """From a transformers config (or its ``config.json`` dict)."""
        get = (lambda k, d=None: cfg.get(k, d)) if isinstance(cfg, Mapping) else (lambda k, d=None: getattr(cfg, k, d))
        if get("text_config") is not None:  # a multimodal wrapper: the language model's config
            inner = get("text_config")
            return cls.from_hf_config(
                inner
                if isinstance(inner, Mapping)
                else vars(inner) | {"model_type": getattr(inner, "model_type", get("model_type"))},
                name,
            )
        kind = str(get("model_type", "unknown"))
        d = int(_first(get, "hidden_size", "n_embd", "d_model"))
        heads = int(_first(get, "num_attention_heads", "n_head", "num_heads", default=1))
        experts = int(_first(get, "num_experts", "num_local_experts", "n_routed_experts", default=0) or 0)
        d_mlp = _first(get, "moe_intermediate_size", default=None) if experts else None
        d_mlp = d_mlp or _first(get, "intermediate_size", "n_inner", "ffn_dim", "d_ff", default=None) or 4 * d
        return cls(
            name=name or str(get("_name_or_path", "") or kind),
            family=kind,
            n_layers=int(_first(get, "num_hidden_layers", "n_layer", "num_layers")),
            d_model=d,
            n_heads=heads,
            n_kv_heads=int(_first(get, "num_key_value_heads", default=heads) or heads),
            d_head=int(_first(get, "head_dim", default=None) or d // heads),
            d_mlp=int(d_mlp),
            vocab=int(get("vocab_size")),
            n_ctx=int(_first(get, "max_position_embeddings", "n_positions", "n_ctx", default=2048)),
            tied=bool(get("tie_word_embeddings", True)),
            gated_mlp=kind not in ("gpt2", "gpt_neox", "opt", "bloom", "falcon", "gpt_bigcode", "starcoder2", "phi"),
            n_experts=experts,
            experts_per_token=int(_first(get, "num_experts_per_tok", "experts_per_token", default=0) or 0),
        )


def _first(get, *keys: str, default: Any = KeyError) -> Any:
    for k in keys:
        v = get(k)
        if v is not None:
            return v
    if default is KeyError:
        raise KeyError(f"the config has none of {list(keys)}")
    return default


# the model the calibration's forwards were measured on: SmolLM2-135M's config.json, transcribed (so a plan on it
# never converts the model)
CALIBRATION_MODEL = ModelShape(
    name="smollm2-135m",
    family="llama",
    n_layers=30,
    d_model=576,
    n_heads=9,
    n_kv_heads=3,
    d_head=64,
    d_mlp=1536,
    vocab=49152,
    n_ctx=8192,
)


def model_shape(name: str) -> ModelShape:
    """The shape of ``name``: ``tiny:<kind>``, an embedded model, a local directory with a
    ``config.json``, a ``config.json`` file, or a seed model's hub id (its published config.json:
    :data:`tlgeo.families.checkpoints.SEED_CHECKPOINTS`)."""
    from .families import family_of_config
    from .families.checkpoints import SEED_CHECKPOINTS
    from .models import EMBEDDED_MODELS, UnknownModelError, embedded_model_dir, tiny_config

    if name.startswith("tiny:"):
        return ModelShape.from_hf_config(tiny_config(name.split(":", 1)[1]), name)
    if name in SEED_CHECKPOINTS:
        family = family_of_config(SEED_CHECKPOINTS[name])
        if family is not None and not family.attention:
            raise InputError(f"{name}: the planner counts attention and MLP FLOPs; {family.name} has neither")
        return ModelShape.from_hf_config(SEED_CHECKPOINTS[name], name)
    if name in EMBEDDED_MODELS:
        return ModelShape.from_hf_config(json.loads((embedded_model_dir(name) / "config.json").read_text()), name)
    path = Path(name).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        return ModelShape.from_hf_config(json.loads(path.read_text()), name)
    raise UnknownModelError(
        f"no shape for {name!r}: give tiny:<kind>, an embedded model ({', '.join(EMBEDDED_MODELS)}), "
        f"a directory or config.json, or a seed model: {', '.join(SEED_CHECKPOINTS)}"
    )


def model_format(name: str) -> str:
    """How ``name`` is loaded, for its start-up's price: ``tiny`` (random weights built in memory), ``embedded``
    (the converted model in the cache, its checksums verified), or ``directory`` (a local folder; a hub id
    too: read from the local hub cache, its download not counted)."""
    from .models import EMBEDDED_MODELS

    if name.startswith("tiny:"):
        return "tiny"
    return "embedded" if name in EMBEDDED_MODELS else "directory"


# a GPU's dense float32 matmuls over its bfloat16 ones, from the datasheets (an assumption, not measured here): torch
# leaves TF32 off for float32 matmuls by default, so float32 runs at the FP32 rate (H100/H200 SXM 67 vs 989 TFLOP/s,
# A100 19.5 vs 312)
H100_FLOAT32_SLOWDOWN = 989 / 67
A100_FLOAT32_SLOWDOWN = 312 / 19.5


@dataclass(frozen=True)
class Device:
    """A device the planner estimates for: its memory and, for a GPU, the FLOP/s it is assumed to reach on a forward
    in bfloat16 (``flops``; ``dtype_slowdown``: a forward's time in each dtype over bfloat16's, 1 where absent). A
    CPU's FLOP/s per dtype and thread count are the calibration table's (its rows of this device, else ``cpu``'s)."""

    name: str
    memory_gib: float
    note: str
    gpu: bool = True
    flops: float = 0.0
    dtype_slowdown: Mapping[str, float] = field(default_factory=dict)

    def slowdown(self, dtype: str) -> float:
        return float(self.dtype_slowdown.get(dtype, 1.0))

    def forward_flops(self, dtype: str, threads: int | None = None, calib: Calibration | None = None) -> float:
        """FLOP/s of a forward in ``dtype`` weights (a CPU: measured at ``threads``, :func:`calibration`)."""
        if self.gpu:
            return self.flops / self.slowdown(dtype)
        return (calib or calibration()).value("forward.flops", dtype, threads, self.name)


_HOPPER = {"bfloat16": 1.0, "float16": 1.0, "float32": H100_FLOAT32_SLOWDOWN}
DEVICES: dict[str, Device] = {
    "cpu": Device(
        "cpu",
        24.0,
        "the CPU of the planner's calibration table (tlgeo/planner_calibration.csv: "
        "its machine and threads; CPUs differ ~2x)",
        gpu=False,
    ),
    "cpu-avx2": Device(
        "cpu-avx2",
        24.0,
        "the calibration's CPU without bfloat16 / float16 matrix units (oneDNN "
        "held to AVX2; float32 as the calibration's CPU)",
        gpu=False,
    ),
    "h100": Device(
        "h100",
        80.0,
        f"H100 SXM: 989 TFLOP/s bf16 dense x {GPU_EFFICIENCY}",
        flops=989e12 * GPU_EFFICIENCY,
        dtype_slowdown=_HOPPER,
    ),
    "h200": Device(
        "h200",
        141.0,
        f"H200: 989 TFLOP/s bf16 dense x {GPU_EFFICIENCY}",
        flops=989e12 * GPU_EFFICIENCY,
        dtype_slowdown=_HOPPER,
    ),
    "a100": Device(
        "a100",
        80.0,
        f"A100 80GB: 312 TFLOP/s bf16 dense x {GPU_EFFICIENCY}",
        flops=312e12 * GPU_EFFICIENCY,
        dtype_slowdown={"bfloat16": 1.0, "float16": 1.0, "float32": A100_FLOAT32_SLOWDOWN},
    ),
}


@dataclass(frozen=True)
class Work:
    """One step of an analysis, as the shape of its work: ``tokens`` forward tokens in windows of
    ``window`` tokens, ``batch`` windows per forward; ``blocks`` and ``readout``: the share of the
    blocks they go through and the positions unembedded per token
    (:meth:`ModelShape.forward_flops`); ``hooks``: what its forwards run besides a bare forward, as
    amounts of calibrated kinds (``{"profile.site": 5}``: the table prices each unit as a share of a bare
    forward's time); ``logit_copies``: ``[tokens, vocab]`` float32 arrays it holds at
    its peak (logits, log-probabilities); ``eager``: attention patterns materialised (sites that
    read them); ``kept_bytes``: what the step holds on the device besides one forward (caches);
    ``host_bytes``: what it holds in host memory (state pools, CPU copies); ``weight_copies``:
    copies of the model's weights it holds beside the model's own, in its dtype on its device (a
    compressed copy; counted in ``kept_gib``); ``host``: its host work besides the forwards (fits, probes, loads,
    per-call overhead) as amounts of calibrated kinds (``{"host.flop": 3e9}``: the table prices each unit in
    seconds), the same on every device. A step with no forward has ``tokens=0``."""

    step: str
    tokens: int
    window: int
    batch: int = 1
    hooks: Mapping[str, float] = field(default_factory=dict)
    logit_copies: float = LOGIT_COPIES
    eager: bool = False
    kept_bytes: float = 0.0
    note: str = ""
    blocks: float = 1.0
    readout: float = 1.0
    host_bytes: float = 0.0
    weight_copies: float = 0.0
    host: Mapping[str, float] = field(default_factory=dict)


DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def estimate(
    shape: ModelShape,
    work: Sequence[Work],
    device: str | Device = "cpu",
    dtype: str = "float32",
    threads: int | None = None,
    calib: Calibration | None = None,
) -> pd.DataFrame:
    """One row per step: forward tokens, TFLOPs, seconds (the forwards at the device's speed in ``dtype`` and, on a CPU,
    ``threads``: the calibration's; the host work as the calibration prices it), and peak memory (GiB) split into
    weights, one forward's activations, what the step keeps on the device, what it keeps in host
    memory (in the peak on a CPU, beside it on a GPU) and (CPU) the process."""
    dev = DEVICES[device] if isinstance(device, str) else device
    if dtype not in DTYPE_BYTES:
        raise InputError(f"unknown dtype {dtype!r}; choose from {list(DTYPE_BYTES)}")
    cal = calib or calibration()
    rate = dev.forward_flops(dtype, threads, cal) if any(w.tokens for w in work) else 1.0
    block = 0.0 if dev.gpu else cal.value("forward.block", threads=threads, device=dev.name)
    weights = shape.params * DTYPE_BYTES[dtype] / GIB
    rows = []
    for w in work:
        flops = shape.forward_flops(w.tokens, w.window, w.blocks, w.readout)
        tokens_live = min(w.batch * w.window, max(w.tokens, w.window)) if w.tokens else 0  # a last batch: fewer
        act = (
            tokens_live
            * (
                ACTIVATION_FLOATS * shape.d_model
                + shape.d_mlp * max(1, shape.experts_per_token)
                + w.logit_copies * shape.vocab
            )
            * 4
        )
        if w.eager and w.tokens:
            act += w.batch * shape.n_heads * w.window**2 * 4 * 2
        process = 0.0 if dev.gpu else CPU_PROCESS_GIB
        host, kept = w.host_bytes / GIB, w.kept_bytes / GIB + w.weight_copies * weights
        peak = weights + act / GIB + kept + (0.0 if dev.gpu else host) + process
        # on a CPU, each forward's fixed cost per block: a tiny model's forwards are all overhead
        forwards = -(-w.tokens // max(1, w.window * w.batch)) if w.tokens else 0
        fixed = forwards * shape.n_layers * w.blocks * block
        host_s = cal.price(w.host, threads, dev.name)
        hooks = 1.0 + cal.price(w.hooks, threads, dev.name) if w.tokens else 1.0
        rows.append(
            {
                "step": w.step,
                "forward_tokens": int(w.tokens),
                "window": w.window,
                "batch": w.batch,
                "tflops": flops / 1e12,
                "seconds": flops / rate * hooks + fixed + host_s,
                "cpu_seconds": host_s,
                "weights_gib": weights,
                "activations_gib": act / GIB,
                "kept_gib": kept,
                "host_gib": host,
                "process_gib": process,
                "peak_gib": peak,
                "fits": peak <= dev.memory_gib,
                "note": w.note,
            }
        )
    df = pd.DataFrame(rows)
    if len(df):
        total = {
            "step": "total",
            "forward_tokens": int(df["forward_tokens"].sum()),
            "tflops": df["tflops"].sum(),
            "seconds": df["seconds"].sum(),
            "cpu_seconds": df["cpu_seconds"].sum(),
            "host_gib": df["host_gib"].max(),
            "peak_gib": df["peak_gib"].max(),
            "fits": bool(df["fits"].all()),
        }
        df = pd.concat([df, pd.DataFrame([total])], ignore_index=True)
    return df.assign(model=shape.name, device=dev.name, dtype=dtype)


def start_seconds(
    shape: ModelShape,
    dtype: str = "float32",
    fmt: str = "directory",
    threads: int | None = None,
    calib: Calibration | None = None,
) -> dict[str, float]:
    """A command's start-up before its work, as the calibration measured it: ``imports`` (torch, transformers,
    TransformerLens, tlgeo's commands) and ``load`` (booting a model of ``fmt``, :func:`model_format`: a fixed part
    and a part per GiB of its weights in ``dtype``), the same on any device (the planner has no GPU's)."""
    cal = calib or calibration()
    gib = shape.params * DTYPE_BYTES[dtype] / GIB
    load = cal.value(f"start.load.{fmt}", threads=threads)
    if fmt != "tiny":
        load += gib * cal.value(f"start.load.{fmt}.gib", threads=threads)
    return {"imports": cal.value("start.imports", threads=threads), "load": load}


def windows(tokens: int, window: int) -> int:
    """Forward tokens of ``tokens`` read in whole windows of ``window`` (the last one partial)."""
    return int(window * math.ceil(tokens / window)) if tokens else 0


def text_tokens(text: str, max_tokens: int | None = None, bos: bool = True) -> int:
    """Tokens of ``text`` without a tokenizer (:data:`CHARS_PER_TOKEN`), BOS first, at most ``max_tokens``."""
    n = int(bos) + math.ceil(len(text) / CHARS_PER_TOKEN)
    return min(n, max_tokens) if max_tokens else n


def padded_batches(lengths: Sequence[int], batch: int) -> tuple[int, int]:
    """``(forward tokens, longest row)`` of rows of ``lengths`` in batches of ``batch`` in their order,
    each batch padded to its longest row."""
    lengths = list(lengths)
    tokens = sum(len(c) * max(c) for c in (lengths[i : i + batch] for i in range(0, len(lengths), batch)))
    return tokens, max(lengths, default=0)
