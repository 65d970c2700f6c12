"""Edit-hook overhead and analysis smoke runs on a random model of a real 8B shape, for a short GPU window.

Builds a randomly initialised Llama-3.1-8B or Qwen3-8B shape (or a few-MB ``tiny`` one) straight
on the device in the chosen dtype -- no weights are downloaded, read or written; only ``config.json``
and the byte tokenizer go to a temporary folder for the bridge's boot -- and prints, measured side by
side in one run: the bare forward of a ``[batch, seq]`` random-token batch; the same forward under
each site's ``Edit(site, s_par=0)`` and no-op ``Edit(site)`` hooks at every layer, as a ratio to the
bare forward (the issue's target: ``value_excl_self`` at s_par=0 <= 1.05x the bare bf16 forward at
the 8B shape); each registered analysis run once with its ``tiny`` config on the big model (an error
or time-out, ``--analysis-timeout`` 60 s each and ``--budget`` 420 s for the whole run by default, is
printed, not raised); and the peak GPU memory of each. Timings: one warm-up round,
then ``--repeats`` rounds interleaved (the order rotates each round), median and median of per-round
ratios, ``torch.cuda.synchronize()`` around every timed call.

On a GPU machine without transformer-lens (the device notes list Python 3.12, torch, transformers 5.17,
accelerate, jaxtyping, pandas, scikit-learn, matplotlib and numba in the H200 image, but not transformer-lens):
here, with ``.whl/`` in ``.git/info/exclude``, ``pip download --no-deps --only-binary=:all: --python-version
3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl
transformer-lens==4.3.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 conllu==6.0.0
scikit-dimension==0.5.0`` (six pure-Python wheels, 2.6 MB; the last two only for the dirmag and pdsf
analyses), carry ``.whl`` and begin the command there with ``python3 -m pip install -q --no-index --no-deps
--target /tmp/site .whl/*.whl && export
PYTHONPATH=/tmp/site``. Checked here: that download and install (into a --target folder), and a
tiny run with every package outside the image's list and those wheels hidden (the forwards and all
analyses but compression ran). Run on an H200 on 2026-12-04 (``results/bench-gpu/``, ``docs/cli.md``),
with ``circuitsvis==1.43.3`` and ``importlib-metadata==8.7.0`` carried too for the atlas's views
(importlib-metadata 10 needs ``lazy_importer``, which is not in the image). The analyses read corpora from
``$TLGEO_DATA``
(default ``../shared/data``, which does not travel with the checkout: copy it into an ignored folder,
carry it and set ``TLGEO_DATA``), else each prints an error line. compression (needs llmcompressor) is
skipped at the 8B shapes unless named in ``--analyses``: it hashes and exports the dense model in
float32 on the CPU.

    python scripts/bench_gpu.py --shape llama-8b                  # GPU: batch 4 x 1024, bf16
    python scripts/bench_gpu.py --shape qwen3-8b --repeats 7 --out qwen3.csv
    python scripts/bench_gpu.py --shape tiny --device cpu --dtype float32 --batch 1 --seq 16 --repeats 1
    python scripts/bench_gpu.py --shape tiny --device cuda --parity parity.csv   # CPU against GPU, float32
    python scripts/bench_gpu.py --compare-folders atlas-cpu atlas-gpu --out diff.csv
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import math
import os
import platform
import signal
import statistics
import sys
import tempfile
import threading
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a plain checkout (no pip install)

# the byte tokenizer's ids (tlgeo.models.byte_tokenizer: 256 bytes, then BOS, EOS = pad)
_SPECIAL = dict(bos_token_id=256, eos_token_id=257, pad_token_id=257)

# name -> (transformers config class, its keyword arguments): the public configs' shapes
SHAPES: dict[str, tuple[str, dict]] = {
    "llama-8b": (
        "LlamaConfig",
        dict(  # meta-llama/Llama-3.1-8B
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            vocab_size=128256,
            max_position_embeddings=131072,
            rms_norm_eps=1e-5,
            rope_theta=500000.0,
            tie_word_embeddings=False,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
        ),
    ),
    "qwen3-8b": (
        "Qwen3Config",
        dict(  # Qwen/Qwen3-8B
            hidden_size=4096,
            intermediate_size=12288,
            num_hidden_layers=36,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=128,
            vocab_size=151936,
            max_position_embeddings=40960,
            rms_norm_eps=1e-6,
            rope_theta=1000000.0,
            tie_word_embeddings=False,
        ),
    ),
    "tiny": (
        "LlamaConfig",
        dict(  # the Llama family at a few MB: GQA 4/2 heads, 3 layers (pdsf's tiny config uses layer 2)
            hidden_size=64,
            intermediate_size=160,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=258,
            max_position_embeddings=256,
            rms_norm_eps=1e-5,
            rope_theta=500000.0,
            tie_word_embeddings=False,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        ),
    ),
    "tiny-qwen3": (
        "Qwen3Config",
        dict(  # the Qwen3 family (q/k norms, head_dim set apart) at a few MB
            hidden_size=64,
            intermediate_size=160,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            vocab_size=258,
            max_position_embeddings=256,
            rms_norm_eps=1e-6,
            rope_theta=1000000.0,
            tie_word_embeddings=False,
        ),
    ),
}
BIG_SKIPS = {
    "compression": "skipped at 8B shapes by default: it hashes and exports the dense model in "
    "float32 on the CPU (name it in --analyses to run it)"
}
TARGET_SITE, TARGET_RATIO = "value_excl_self", 1.05


class Timeout(Exception):
    """An analysis ran past ``--analysis-timeout``."""


@dataclass
class Row:
    section: str  # forward | analysis
    name: str  # bare | edit | noop | the analysis
    site: str = "-"
    s_par: str = "-"
    times: list[float] = field(default_factory=list)
    peaks: list[float] = field(default_factory=list)  # bytes, per timed call
    extra: list[float] = field(default_factory=list)  # bytes: the peak over what was allocated before the call
    ratios: list[float] = field(default_factory=list)  # per round, over that round's bare forward
    status: str = "ok"

    @property
    def seconds(self) -> float:
        return statistics.median(self.times) if self.times else math.nan

    @property
    def peak_gib(self) -> float:
        return max(self.peaks) / 2**30 if self.peaks else math.nan

    @property
    def extra_gib(self) -> float:
        return max(self.extra) / 2**30 if self.extra else math.nan


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", choices=list(SHAPES), default="llama-8b")
    p.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda if available, else cpu)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=None, help="tokens per row (default: 1024 on GPU, 128 on CPU)")
    p.add_argument(
        "--repeats", type=int, default=5, help="timed rounds after one warm-up round; the median is reported"
    )
    p.add_argument("--skip-analyses", action="store_true", help="time the forwards only")
    p.add_argument(
        "--analyses",
        default=None,
        help="comma-separated analyses to run (default: all registered; compression not at 8B shapes)",
    )
    p.add_argument(
        "--analysis-timeout",
        type=float,
        default=60.0,
        help="seconds before an analysis is stopped and reported as timed out (0: no limit)",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=420.0,
        help="seconds for the whole run: no analysis starts, or runs, past it (0: no limit)",
    )
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument(
        "--parity",
        default=None,
        metavar="CSV",
        help="instead of timing: each analysis's tiny run on the CPU and on --device, float32, same "
        "weights; the largest difference per table, written to CSV (tiny shapes only)",
    )
    p.add_argument(
        "--compare-folders",
        nargs=2,
        default=None,
        metavar=("CPU_DIR", "DEVICE_DIR"),
        help="only compare the tables of two result folders of one run on two devices (no model); "
        "with --out, the rows go to that CSV",
    )
    p.add_argument(
        "--parity-dump",
        default=None,
        metavar="DIR",
        help="with --parity: every table of both runs, as DIR/{cpu,device}/<analysis>/<table>.csv",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write the rows to this CSV file")
    args = p.parse_args(argv)
    if args.batch < 1 or (args.seq is not None and args.seq < 1) or args.repeats < 1:
        p.error("--batch, --seq and --repeats must be positive")
    return args


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _reset_peak(device: torch.device) -> float:
    """Reset the peak-memory counter; the bytes allocated now (0 off CUDA)."""
    if device.type != "cuda":
        return 0.0
    torch.cuda.reset_peak_memory_stats(device)
    return float(torch.cuda.memory_allocated(device))


def _record_peak(row: Row, device: torch.device, before: float) -> None:
    if device.type == "cuda":
        peak = float(torch.cuda.max_memory_allocated(device))
        row.peaks.append(peak)
        row.extra.append(peak - before)


def build_model(shape: str, device: torch.device, dtype: torch.dtype, seed: int, *, init_on_cpu: bool = False):
    """A random model of ``shape`` made directly on ``device`` in ``dtype``, booted in the bridge from
    a temporary folder holding only its config and the byte tokenizer (``hf_model=``: no weights on disk).
    ``init_on_cpu``: initialise on the CPU, then move, so that every device gets the same weights."""
    import transformers
    from transformer_lens.model_bridge import TransformerBridge
    from transformers.utils import logging as hf_logging

    from tlgeo.models import byte_tokenizer

    cls_name, kwargs = SHAPES[shape]
    config = getattr(transformers, cls_name)(**kwargs, **_SPECIAL)
    torch.manual_seed(seed)
    with torch.device("cpu" if init_on_cpu else device):  # else allocated and initialised on the device
        hf = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32 if init_on_cpu else dtype)
    if init_on_cpu:
        hf = hf.to(device=device, dtype=dtype)
    hf.eval()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        with tempfile.TemporaryDirectory(prefix=f"tlgeo-bench-{shape}-") as folder, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config.save_pretrained(folder)
            byte_tokenizer().save_pretrained(folder)  # the bridge reloads its tokenizer by path
            model = TransformerBridge.boot_transformers(folder, hf_model=hf, device=device, dtype=dtype)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    model.eval()
    model.tlgeo_name = f"random:{shape}"
    return model


def forward_configs(model) -> list[tuple[str, str, float, list]]:
    """``(name, site, s_par, hooks)``: the bare forward, then each site's removal and no-op edit."""
    from tlgeo.hooks.edits import Edit
    from tlgeo.hooks.sites import DECOMPOSITION_SITES, SITES

    sites = list(DECOMPOSITION_SITES) + (["diag"] if "diag" in SITES and "diag" not in DECOMPOSITION_SITES else [])
    out = [("bare", "-", math.nan, [])]
    for site in sites:
        out.append(("edit", site, 0.0, Edit(site, s_par=0.0).hooks(model)))
        out.append(("noop", site, 1.0, Edit(site).hooks(model)))
    return out


def time_forwards(model, tokens: torch.Tensor, repeats: int, device: torch.device) -> list[Row]:
    configs = forward_configs(model)
    rows = [Row("forward", n, site, "-" if math.isnan(s) else f"{s:g}") for n, site, s, _ in configs]
    with torch.no_grad():
        for r in range(1 + repeats):  # round 0 is the warm-up
            k = r % len(configs)
            order = list(range(k, len(configs))) + list(range(k))  # rotate who goes first
            spent = [0.0] * len(configs)
            for i in order:
                hooks = configs[i][3]
                with model.hooks(fwd_hooks=hooks):  # attached outside the timed region
                    before = _reset_peak(device)
                    _sync(device)
                    t0 = time.perf_counter()
                    logits = model(tokens)
                    _sync(device)
                    spent[i] = time.perf_counter() - t0
                del logits
                if r:
                    rows[i].times.append(spent[i])
                    _record_peak(rows[i], device, before)
            if r:
                for i, row in enumerate(rows):
                    row.ratios.append(spent[i] / spent[0])
    return rows


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise :class:`Timeout` in the block after ``seconds`` (SIGALRM: main thread, POSIX; else no limit)."""
    usable = seconds > 0 and hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def _alarm(signum, frame):
        raise Timeout(f"stopped after {seconds:.0f} s (--analysis-timeout / --budget)")

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@contextlib.contextmanager
def scratch_cache():
    """``$TLGEO_CACHE`` pointed at a temporary folder (compressed models etc. go there, then away)."""
    old = os.environ.get("TLGEO_CACHE")
    with tempfile.TemporaryDirectory(prefix="tlgeo-bench-cache-") as tmp:
        os.environ["TLGEO_CACHE"] = tmp
        try:
            yield
        finally:
            if old is None:
                os.environ.pop("TLGEO_CACHE", None)
            else:
                os.environ["TLGEO_CACHE"] = old


def run_analyses(model, args, device: torch.device, deadline: float = math.inf) -> list[Row]:
    from tlgeo.report.registry import load_analyses

    registered = load_analyses()
    if args.analyses:
        wanted = [a.strip() for a in args.analyses.split(",") if a.strip()]
        unknown = [a for a in wanted if a not in registered]
        if unknown:
            print(f"unknown analyses {unknown}; registered: {list(registered)}", flush=True)
        chosen = [a for a in registered if a in wanted]
        skipped: dict[str, str] = {a: "not asked for (--analyses)" for a in registered if a not in wanted}
    else:
        chosen = list(registered)
        skipped = dict(BIG_SKIPS) if args.shape.endswith("-8b") else {}
    rows = []
    with scratch_cache():
        for name in registered:
            row = Row("analysis", name)
            rows.append(row)
            if name not in chosen or name in skipped:
                row.status = "skipped: " + skipped.get(name, "not asked for")
                print(f"  {name:<14} {'-':>9} {'-':>9}  {row.status}", flush=True)
                continue
            left = deadline - time.perf_counter()
            if left < 5:
                row.status = f"skipped: the --budget of {args.budget:g} s is spent"
                print(f"  {name:<14} {'-':>9} {'-':>9}  {row.status}", flush=True)
                continue
            limit = min(args.analysis_timeout or math.inf, left)
            a = registered[name]
            before = _reset_peak(device)
            t0 = time.perf_counter()
            try:
                cfg = a.config(**a.tiny)
                with time_limit(0 if math.isinf(limit) else limit), contextlib.redirect_stdout(sys.stderr):
                    a.run(model, cfg)  # its own progress lines go to stderr, the table stays on stdout
                    _sync(device)
            except Exception as e:  # noqa: BLE001 - one failing analysis must not stop the benchmark
                traceback.print_exc(file=sys.stderr)  # on stderr, where its progress lines went
                msg = " ".join(str(e).split())
                row.status = f"error: {type(e).__name__}: {msg[:300]}"
                with contextlib.suppress(Exception):
                    model.reset_hooks()
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            row.times.append(time.perf_counter() - t0)
            _record_peak(row, device, before)
            print(f"  {name:<14} {row.seconds:9.2f} {_fmt(row.peak_gib, '9.2f')}  {row.status}", flush=True)
    return rows


def _table_difference(a: "pd.DataFrame", b: "pd.DataFrame", skip: set[str]) -> tuple[int, float, str]:
    """``(numeric cells compared, largest difference, its column)`` of two runs' tables; a difference is
    ``|a - b| / max(1, |a|)`` (absolute below 1, relative above); inf where the shapes, the labels or the
    missing values differ."""
    import numpy as np

    if a.shape != b.shape or list(a.columns) != list(b.columns):
        return 0, math.inf, f"shape {a.shape} vs {b.shape}"
    n, worst, where = 0, 0.0, "-"
    for col in a.columns:
        if col in skip:
            continue
        x, y = a[col], b[col]
        if x.dtype.kind in "fiub" and y.dtype.kind in "fiub":
            x, y = x.to_numpy(np.float64), y.to_numpy(np.float64)
            if not np.array_equal(np.isnan(x), np.isnan(y)):
                return n, math.inf, f"{col} (missing values differ)"
            ok = ~np.isnan(x)
            n += int(ok.sum())
            d = np.abs(x[ok] - y[ok]) / np.maximum(1.0, np.abs(x[ok]))
            if d.size and float(d.max()) > worst:
                worst, where = float(d.max()), col
        elif not x.astype(str).equals(y.astype(str)):
            return n, math.inf, f"{col} (labels differ)"
    return n, worst, where


def _by_key(df: "pd.DataFrame", key: list[str]) -> "pd.DataFrame":
    """``df``'s rows in the order of their key columns (as text: a key cell may be a list), index reset."""
    if not key:
        return df.reset_index(drop=True)
    text = df[key].astype(str).agg("\x1f".join, axis=1)
    return df.iloc[text.argsort(kind="stable").to_numpy()].reset_index(drop=True)


def compare_folders(cpu_dir: str, device_dir: str) -> list[dict]:
    """Every table (``*.csv``, ``*.csv.gz``) of two result folders of the same run on two devices (e.g. the
    tiny atlas on the CPU and on the GPU), compared as :func:`run_parity` compares tables; identity and
    timing columns left out. A table in one folder only is reported as such."""
    import pandas as pd

    from tlgeo.runner.results import IDENTITY

    skip = set(IDENTITY) | {"seconds", "wall_s", "bare_forwards", "peak_rss_mb", "started", "finished"}
    a, b = Path(cpu_dir), Path(device_dir)
    names = sorted({p.name for d in (a, b) for p in d.glob("*.csv*")})
    out = []
    for name in names:
        if not (a / name).exists() or not (b / name).exists():
            out.append(
                dict(table=name, cells=0, max_diff=math.inf, column=f"only in {a if (a / name).exists() else b}")
            )
            continue
        n, worst, col = _table_difference(pd.read_csv(a / name), pd.read_csv(b / name), skip)
        out.append(dict(table=name, cells=n, max_diff=worst, column=col))
    return out


def run_parity(args, device: torch.device) -> list[dict]:
    """Every registered analysis's tiny run on the CPU and on ``device``, both in float32 with the same
    weights (initialised on the CPU under ``--seed``): per table, the numeric cells compared and the largest
    difference (:func:`_table_difference`); timing and identity columns are left out."""
    from tlgeo.report.registry import load_analyses
    from tlgeo.runner.results import IDENTITY

    models = {
        d: build_model(
            args.shape, torch.device(d) if d == "cpu" else device, torch.float32, args.seed, init_on_cpu=True
        )
        for d in ("cpu", "device")
    }
    registered = load_analyses()
    wanted = [a.strip() for a in args.analyses.split(",")] if args.analyses else list(registered)
    out = []
    with scratch_cache():
        for name in (n for n in registered if n in wanted):
            a = registered[name]
            results, status = {}, "ok"
            for d, model in models.items():
                try:
                    with contextlib.redirect_stdout(sys.stderr), time_limit(args.analysis_timeout):
                        results[d] = a.run(model, a.config(**a.tiny))
                except Exception as e:  # noqa: BLE001 - reported, the other analyses go on
                    traceback.print_exc(file=sys.stderr)
                    status = f"error on {d}: {type(e).__name__}: {' '.join(str(e).split())[:200]}"
                    with contextlib.suppress(Exception):
                        model.reset_hooks()
                    break
            if status != "ok":
                out.append(dict(analysis=name, table="-", cells=0, max_diff=math.nan, column="-", status=status))
                print(f"  {name:<14} {'-':<22} {'-':>7} {'-':>10}  {status}", flush=True)
                continue
            tables = {d: r.tables() for d, r in results.items()}
            if args.parity_dump:
                for d, ts in tables.items():
                    for t_name, df in ts.items():
                        folder = Path(args.parity_dump) / d / name
                        folder.mkdir(parents=True, exist_ok=True)
                        df.to_csv(folder / f"{t_name}.csv", index=False)
            for t in a.result.TABLES:
                if t.name not in tables["cpu"] and t.name not in tables["device"]:
                    continue
                if (t.name in tables["cpu"]) != (t.name in tables["device"]):
                    n, worst, col = 0, math.inf, "made on one device only"
                else:
                    skip = set(t.volatile) | set(IDENTITY)
                    key = [c for c in t.key if c not in skip and c in tables["cpu"][t.name].columns]
                    # rows by their key: a table ranked by a value (geometries' summary) may swap near-ties
                    cpu_t, dev_t = (_by_key(tables[d][t.name], key) for d in ("cpu", "device"))
                    n, worst, col = _table_difference(cpu_t, dev_t, skip)
                out.append(dict(analysis=name, table=t.name, cells=n, max_diff=worst, column=col, status="ok"))
                print(f"  {name:<14} {t.name:<22} {n:>7} {worst:10.2e}  {col}", flush=True)
    return out


def _fmt(x: float, spec: str) -> str:
    return format(x, spec) if not math.isnan(x) else format("-", f">{spec.split('.')[0]}")


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = [f"python {platform.python_version()}", f"torch {torch.__version__}"]
    for pkg in ("transformer-lens", "transformers"):
        try:
            out.append(f"{pkg} {version(pkg)}")
        except PackageNotFoundError:
            out.append(f"{pkg} (not installed as a distribution)")
    return ", ".join(out)


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        return f"{device} {p.name} ({p.total_memory / 2**30:.0f} GiB, CUDA {torch.version.cuda})"
    return f"{device} {platform.processor() or platform.machine()} ({torch.get_num_threads()} torch threads)"


def write_csv(path: str, rows: list[Row], meta: dict) -> None:
    cols = [
        "section",
        "name",
        "site",
        "s_par",
        "median_s",
        "ratio",
        "paired_ratio",
        "peak_gib",
        "extra_gib",
        "n",
        "status",
        *meta,
    ]
    bare = rows[0].seconds if rows and rows[0].name == "bare" else math.nan
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in rows:
            fwd = r.section == "forward"
            w.writerow(
                [
                    r.section,
                    r.name,
                    r.site,
                    r.s_par,
                    r.seconds,
                    r.seconds / bare if fwd else "",
                    statistics.median(r.ratios) if fwd and r.ratios else "",
                    r.peak_gib,
                    r.extra_gib,
                    len(r.times),
                    r.status,
                    *meta.values(),
                ]
            )


def _compare_main(args: argparse.Namespace) -> int:
    """``--compare-folders``: print each table's largest difference and write them to ``--out``."""
    rows = compare_folders(*args.compare_folders)
    print(f"  {'table':<36} {'cells':>7} {'max_diff':>10}  column")
    for r in rows:
        print(f"  {r['table']:<36} {r['cells']:>7} {r['max_diff']:10.2e}  {r['column']}")
    if args.out:
        with open(args.out, "w", newline="") as f:
            w = csv.DictWriter(f, ["table", "cells", "max_diff", "column"])
            w.writeheader()
            w.writerows(rows)
    return 0


def _parity_main(args: argparse.Namespace, device: torch.device) -> int:
    """``--parity``: each analysis's tiny run on the CPU and on ``device``, their differences written out."""
    if args.shape.endswith("-8b"):
        print(
            "bench_gpu: --parity runs on the tiny shapes only (it runs every analysis on the CPU too)",
            file=sys.stderr,
        )
        return 2
    print(
        f"parity   {args.shape}: each analysis's tiny run on cpu and on {_device_name(device)}, float32, "
        f"same weights; max_diff = max |cpu - device| / max(1, |cpu|) over a table's numeric cells"
    )
    print(f"  {'analysis':<14} {'table':<22} {'cells':>7} {'max_diff':>10}  column")
    rows = run_parity(args, device)
    with open(args.parity, "w", newline="") as f:
        w = csv.DictWriter(f, [*rows[0], "device"] if rows else ["analysis"])
        w.writeheader()
        w.writerows({**r, "device": _device_name(device)} for r in rows)
    print(f"\nrows written to {args.parity}")
    return 0


def _print_shape(args: argparse.Namespace, model, device: torch.device, built: float) -> int:
    """Print the built model's shape line; its parameter count."""
    n_params = sum(p.numel() for p in model.parameters())
    c = model.cfg
    print(
        f"shape    {args.shape} ({SHAPES[args.shape][0]}): {n_params:,} parameters ({n_params / 1e9:.2f} B), "
        f"{c.n_layers} layers, "
        f"d_model {c.d_model}, {c.n_heads} heads / {getattr(c, 'n_key_value_heads', None) or c.n_heads} KV heads, "
        f"d_head {c.d_head}, d_mlp {c.d_mlp}, vocab {c.d_vocab}; {args.dtype}; built and booted in {built:.1f} s"
        + (f"; {torch.cuda.memory_allocated(device) / 2**30:.1f} GiB allocated" if device.type == "cuda" else "")
    )
    return n_params


def _forward_section(model, args: argparse.Namespace, device: torch.device, seq: int) -> list[Row]:
    """Time the bare and hooked forwards of a random ``[batch, seq]`` batch and print their table."""
    gen = torch.Generator().manual_seed(args.seed)
    tokens = torch.randint(0, model.cfg.d_vocab, (args.batch, seq), generator=gen).to(device)
    print(
        f"\nforward: batch {args.batch} x seq {seq}, {args.dtype}, every layer hooked; one warm-up round, "
        f"{args.repeats} timed round(s) interleaved; ratio = median / median(bare), paired = median of "
        "per-round ratios; "
        f"peak_GiB: peak allocated on the GPU during the call, +GiB: that peak over what was allocated before it"
    )
    rows = time_forwards(model, tokens, args.repeats, device)
    bare = rows[0].seconds
    print(
        f"  {'measure':<6} {'site':<16} {'s_par':>5} {'median_s':>10} {'ratio':>7} {'paired':>7} {'peak_GiB':>9} "
        f"{'+GiB':>7}"
    )
    for r in rows:
        print(
            f"  {r.name:<6} {r.site:<16} {r.s_par:>5} {r.seconds:10.4f} {r.seconds / bare:7.3f} "
            f"{statistics.median(r.ratios):7.3f} {_fmt(r.peak_gib, '9.2f')} {_fmt(r.extra_gib, '7.2f')}"
        )
    target = next((r for r in rows if r.name == "edit" and r.site == TARGET_SITE), None)
    if target is not None:
        ratio = target.seconds / bare
        print(
            f"target   {TARGET_SITE} s_par=0 / bare {args.dtype} forward = {ratio:.3f} "
            f"({'within' if ratio <= TARGET_RATIO else 'above'} {TARGET_RATIO}x)"
        )
    del tokens
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def _analysis_section(model, args: argparse.Namespace, device: torch.device, start: float) -> list[Row]:
    """Run each registered analysis once (unless ``--skip-analyses``) within what is left of ``--budget``."""
    if args.skip_analyses:
        print("\nanalyses: skipped (--skip-analyses)")
        return []
    left = f", {max(0.0, start + args.budget - time.perf_counter()):.0f} s of --budget left" if args.budget > 0 else ""
    print(
        f"\nanalyses: each registered analysis once with its tiny config on {model.tlgeo_name} "
        f"(time-out {args.analysis_timeout:g} s each{left})"
    )
    print(f"  {'analysis':<14} {'seconds':>9} {'peak_GiB':>9}  status")
    return run_analyses(model, args, device, start + args.budget if args.budget > 0 else math.inf)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.compare_folders:
        return _compare_main(args)
    start = time.perf_counter()
    if args.threads:
        torch.set_num_threads(args.threads)
    from tlgeo.models import resolve_device

    try:
        device = resolve_device(args.device or "auto")
    except ValueError as e:
        print(f"bench_gpu: {e}", file=sys.stderr)
        return 2
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    dtype = getattr(torch, args.dtype)
    seq = args.seq or (1024 if device.type == "cuda" else 128)
    if args.parity:
        return _parity_main(args, device)

    print(__doc__.strip().splitlines()[0])
    print(f"device   {_device_name(device)}")
    print(f"versions {_versions()}")
    t0 = time.perf_counter()
    model = build_model(args.shape, device, dtype, args.seed)
    _sync(device)
    built = time.perf_counter() - t0
    n_params = _print_shape(args, model, device, built)
    if seq > model.cfg.n_ctx:
        print(f"bench_gpu: --seq {seq} is longer than the model's context ({model.cfg.n_ctx})", file=sys.stderr)
        return 2

    rows = _forward_section(model, args, device, seq)
    rows += _analysis_section(model, args, device, start)

    if args.out:
        meta = dict(
            shape=args.shape,
            device=_device_name(device),
            dtype=args.dtype,
            batch=args.batch,
            seq=seq,
            repeats=args.repeats,
            params=n_params,
        )
        write_csv(args.out, rows, meta)
        print(f"\nrows written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
