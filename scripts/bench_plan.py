"""The planner's calibration table, and the planner against measured runs, on this machine (run nothing else
meanwhile).

    .venv/bin/python scripts/bench_plan.py --calibrate --threads 1   # writes tlgeo/planner_calibration.csv
    .venv/bin/python scripts/bench_plan.py --threads 1               # predicted vs measured time and peak memory
    .venv/bin/python scripts/bench_plan.py --threads 1 --short       # the short runs: SHORT_RUNS
    .venv/bin/python scripts/bench_plan.py --memory                  # the planner's memory constants, printed
    .venv/bin/python scripts/bench_plan.py --table results/plan-smollm2-135m/plan_vs_measured.csv   # its Markdown

``--calibrate`` measures every row of the planner's calibration table at ``--threads`` and writes it (rows of
other thread counts dropped unless ``--keep-threads``; ``--only`` some parts, the other rows kept): a bare
SmolLM2-135M forward per dtype (and with oneDNN held to AVX2: ``cpu-avx2``), each forward's fixed cost per
block, the host's float64 FLOP/s; the start-up (the imports, each model format's load by size); each analysis's
fixed work per run and the atlas's report from one tiny atlas's step times; then the kinds of :data:`SOLVE`,
each from commands' measured work (after their model is loaded) less what the plan gives them without it. The
default mode times a bare forward here first (this machine against the calibration's: ``ratio/m``), then runs
each command of :data:`RUNS` (``--short``: :data:`SHORT_RUNS`) in a fresh process and prints measured /
predicted wall time (the prediction includes the start-up: imports and loading) and peak resident memory (the
targets: time within 2x, memory within 25 %); a command of :data:`SETUP` (compression's compressed models) runs
first, unmeasured. The calibration's commands and the checked runs differ, but for the tiny atlas (its fixed
work per step measured on one run of it, checked on another).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# commands checked against the planner (none of them is a calibration setting)
RUNS = [
    ("smollm2-135m", "decompose", []),
    ("smollm2-135m", "ppl", ["--site", "attn", "--s-perp", "0", "--tokens", "4096"]),
    ("smollm2-135m", "ppl", ["--site", "attn", "--s-perp", "0", "--tokens", "2048", "--dtype", "bfloat16"]),
    ("smollm2-135m", "profile", ["--tokens", "2048", "--sites", "attn,mlp"]),
    ("tiny:llama", "decompose", ["--tokens", "20000", "--context", "256", "--profile-tokens", "4096"]),
    ("gemma3-270m", "ppl", ["--site", "value_excl_self", "--s-par", "0", "--tokens", "2048"]),  # TLGEO_GEMMA=1 setup
    ("gemma3-270m", "profile", ["--tokens", "1024", "--sites", "attn,mlp,value_full"]),
    (
        "smollm2-135m",
        "pdsf",
        [
            "--geometry-per-group",
            "4",
            "--single-pass-per-group",
            "1",
            "--per-group",
            "1",
            "--new-tokens",
            "16",
            "--repeats",
            "1",
            "--conditions",
            "D,S,random",
        ],
    ),
    (
        "gemma3-270m",
        "pdsf",
        [
            "--geometry-per-group",
            "2",
            "--single-pass-per-group",
            "1",
            "--per-group",
            "1",
            "--new-tokens",
            "16",
            "--repeats",
            "1",
            "--conditions",
            "D,random",
        ],
    ),
    (
        "smollm2-135m",
        "tokenwise",
        [
            "--tokens",
            "2048",
            "--seq-len",
            "64",
            "--classes",
            "diag_psd,linear,global",
            "--patch-tokens",
            "16",
            "--patch-layer-count",
            "3",
            "--n-boot",
            "200",
        ],
    ),
    (
        "gemma3-270m",
        "tokenwise",
        [
            "--tokens",
            "1024",
            "--seq-len",
            "64",
            "--classes",
            "linear,global",
            "--patch-tokens",
            "16",
            "--patch-layer-count",
            "2",
            "--n-boot",
            "200",
        ],
    ),
    (
        "smollm2-135m",
        "dirmag",
        [
            "--sentences",
            "64",
            "--seeds",
            "1",
            "--absolute-deltas",
            "5",
            "--norm-fractions",
            "0.5",
            "--blimp-pairs",
            "8",
            "--probe-sentences",
            "40",
            "--probe-layer-count",
            "3",
        ],
    ),
    ("smollm2-135m", "geometries", ["--tokens", "2048", "--layer-count", "3", "--seeds", "1"]),
    ("smollm2-135m", "compression", ["--methods", "wanda,wanda_2_4"]),  # 12 prompts x 128 tokens
    ("smollm2-135m", "patching", ["--tasks", "ioi", "--prompts", "8", "--exact-components", "head,head_par"]),
    (
        "smollm2-135m",
        "sweeps",
        ["--tokens", "512", "--context", "256", "--s-par-grid", "0,0.5,2", "--s-perp-grid", "0,2"],
    ),
    (
        "smollm2-135m",
        "compare",
        [
            "--tokens",
            "512",
            "--context",
            "256",
            "--zeroshot-limit",
            "10",
            "--ruler-samples",
            "1",
            "--ruler-sites",
            "value_excl_self",
        ],
    ),
    ("smollm2-135m", "heads", ["--texts", "4", "--length", "128"]),
    ("smollm2-135m", "mlp-carrier", ["--tokens", "512", "--context", "256"]),
    ("smollm2-135m", "closed-form", ["--tokens", "128"]),
    ("smollm2-135m", "audit", ["--tokens", "512"]),
]
# short runs, where the start-up is most of the time (at one thread: SmolLM2 path patching at 2 prompts, the tiny
# atlas)
SHORT_RUNS = [
    (
        "smollm2-135m",
        "patching",
        [
            "--tasks",
            "ioi",
            "--prompts",
            "2",
            "--methods",
            "paths",
            "--path-senders",
            "L9",
            "--path-receivers",
            "logits",
        ],
    ),
    ("tiny:llama", "atlas", []),
]
# the trained LayerNorm / RMSNorm pair (two `tlgeo train` runs' checkpoints, not in the repository:
# --pair DIR checks these instead of RUNS; only the models' shape matters, so a smoke run's checkpoints do)
PAIR_RUNS = [
    (c, f) for m, c, f in RUNS if m == "smollm2-135m" and c in ("decompose", "pdsf", "dirmag")
]  # SmolLM2's flags
# made before a run when missing, not measured: the compressed models compression reads (in $TLGEO_CACHE)
SETUP = {"compression": ["compress", "--methods", "wanda,wanda_2_4", "--n-calib", "4", "--pipeline", "basic"]}

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from tlgeo.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "seconds": time.perf_counter() - t0,
                  "peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30}), file=sys.stderr)
"""


def _rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30


FRESH = r"""
import resource, torch
from tlgeo.models import load_model
from tlgeo.data import load_text
from tlgeo.decomposition.analysis import profile_summary_table
from tlgeo.evals.perplexity import perplexity
torch.set_num_threads(2)
def rss(reset=False):  # the peak resident memory since the last reset (Linux: VmHWM, reset through clear_refs)
    if reset:
        open("/proc/self/clear_refs", "w").write("5")
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")) * 1024 / 2**30
m, t = load_model("smollm2-135m"), load_text("wikitext2")
with torch.no_grad():
    m(torch.tensor([[1, 2, 3]]))
r0 = rss(reset=True)
CALL
print(rss() - r0)
"""


def _fresh_peak(call: str) -> float:
    done = subprocess.run(
        [sys.executable, "-c", FRESH.replace("CALL", call)], capture_output=True, text=True, cwd=REPO, check=True
    )
    return float(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------
# --calibrate: the planner's calibration table (tlgeo/planner_calibration.csv), every row measured here
# ---------------------------------------------------------------------------

CAL_MODEL = "smollm2-135m"
# a bare forward per dtype (1 x FORWARD_TOKENS tokens), each forward's fixed cost per block (tiny:llama, 1 x 16
# tokens), the host's float64 FLOP/s (a 512 x 512 product); on --device cpu-avx2 with oneDNN held to AVX2
BASE = r"""
import json, statistics, sys, time, torch
from tlgeo.models import load_model
from tlgeo.planner import model_shape
threads, tokens, reps, dtypes = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(",")
torch.set_num_threads(threads)
def timed(fn, n):
    fn()
    out = []
    for _ in range(n):
        t = time.perf_counter(); fn(); out.append(time.perf_counter() - t)
    return statistics.median(out)
out = {}
with torch.no_grad():
    tiny, ids = load_model("tiny:llama"), torch.randint(0, 100, (1, 16))
    out["block"] = timed(lambda: tiny(ids), 9) / model_shape("tiny:llama").n_layers
    a = torch.randn(512, 512, dtype=torch.float64)
    out["flop64"] = timed(lambda: a @ a, 9) / (2 * 512 ** 3)
    for dt in dtypes:
        m, toks = load_model("smollm2-135m", dtype=dt), torch.randint(0, 49152, (1, tokens))
        out[dt] = timed(lambda: m(toks), reps)
        del m
print(json.dumps(out))
"""
FORWARD_TOKENS = 256
# the start-up: a command's imports (tlgeo's parser: every command's module), then one model loaded; by format
STARTUP = r"""
import json, sys, time
import torch
from tlgeo.cli import build_parser
build_parser()
torch.set_num_threads(int(sys.argv[2]))
from tlgeo.models import load_model
t = time.perf_counter()
load_model(sys.argv[1])
print(json.dumps({"load": time.perf_counter() - t}))
"""
# commands that price the kinds the bare forward does not, each group's kinds solved together by least squares from
# the commands' measured work (their time after the model is loaded) less what the plan gives it without them; in
# order (each group's plan uses the groups before it). None of them is a command the check runs (RUNS, SHORT_RUNS)
_DIRMAG = [
    "--seeds",
    "1",
    "--absolute-deltas",
    "5",
    "--norm-fractions",
    "0.5",
    "--blimp-pairs",
    "0",
    "--repair-sentences",
    "0",
    "--entropy-sentences",
    "0",
]
SOLVE = [
    (
        ["profile.site"],
        [(CAL_MODEL, "profile", ["--tokens", "1024", "--sites", "attn,mlp,block,value_full,value_excl_self"])],
    ),
    (["edit"], [(CAL_MODEL, "ppl", ["--site", "mlp", "--s-par", "0", "--tokens", "2048"])]),
    (["dirmag.sweep"], [(CAL_MODEL, "dirmag", ["--sentences", "32", *_DIRMAG, "--probe-sentences", "0"])]),
    (
        ["dirmag.probe_fit"],
        [(CAL_MODEL, "dirmag", ["--sentences", "8", *_DIRMAG, "--probe-sentences", "60", "--probe-layer-count", "2"])],
    ),
    (
        [
            "tokenwise.knn",
            "tokenwise.fit_class",
            "tokenwise.fit.diag_psd",
            "tokenwise.fit.linear",
            "tokenwise.fit.lowrank",
            "tokenwise.fit.orthogonal",
        ],
        [
            (
                CAL_MODEL,
                "tokenwise",
                [
                    "--tokens",
                    str(t),
                    "--seq-len",
                    "64",
                    "--classes",
                    c,
                    "--layers",
                    ",".join(map(str, range(1, 30))),
                    "--patch-tokens",
                    "3",
                    "--patch-layer-count",
                    "1",
                    "--n-boot",
                    "10",
                ],
            )  # fits at 29 layers: the most of each command's work they can be
            for t, c in (
                (4096, "global"),
                (4096, "diag_psd"),
                (8192, "diag_psd"),
                (4096, "linear"),
                (4096, "lowrank"),
                (4096, "orthogonal"),
            )
        ],
    ),
    (
        ["pdsf.geometry_fit"],
        [(CAL_MODEL, "pdsf", ["--geometry-per-group", "4", "--single-pass", "none", "--per-group", "0"])],
    ),
    (
        ["pdsf.generation_call"],
        [
            (
                CAL_MODEL,
                "pdsf",
                [
                    "--geometry-per-group",
                    "0",
                    "--single-pass",
                    "none",
                    "--per-group",
                    "1",
                    "--new-tokens",
                    "16",
                    "--conditions",
                    "D",
                ],
            )
        ],
    ),
]
# the fixed work of each analysis's run besides its planned steps (its data, tables, plots, provenance: "run.<name>")
# and the atlas's report ("atlas.report"): from the step times of one tiny atlas (a run of its own, before the one
# SHORT_RUNS checks: tiny:gpt2's atlas stops at its pdsf step)
ATLAS_MODEL = "tiny:llama"
CHILD_TIMED = r"""
import json, sys, time
t0 = time.perf_counter()
import tlgeo.models, tlgeo.models.loading
loads = []
def timed_load(*a, _load=tlgeo.models.loading.load_model, **k):
    t = time.perf_counter()
    m = _load(*a, **k)
    loads.append((t - t0, time.perf_counter() - t0))
    return m
tlgeo.models.load_model = tlgeo.models.loading.load_model = timed_load
from tlgeo.cli import main
code = main(sys.argv[1:])
end = time.perf_counter() - t0
first, last = (loads[0][0], loads[-1][1]) if loads else (end, end)
print(json.dumps({"code": code, "seconds": end, "imports_s": first, "load_s": sum(b - a for a, b in loads),
                  "work_s": end - last}), file=sys.stderr)
"""


def _timed_command(model: str, cmd: str, flags: list[str], threads: int, out: Path | None = None) -> dict:
    """``tlgeo <cmd> --model <model> <flags>`` in a fresh process at ``threads``: its wall time (``wall_s``), the time
    before its first model load (``imports_s``, the interpreter's start included), its loads and its work after them."""
    scratch = out or Path(tempfile.mkdtemp(prefix="bench-plan-"))
    t = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD_TIMED,
            cmd,
            "--model",
            model,
            *flags,
            "--threads",
            str(threads),
            "--out",
            str(scratch),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    wall = time.perf_counter() - t
    if out is None:
        shutil.rmtree(scratch, ignore_errors=True)
    if done.returncode:
        sys.exit(f"{cmd} {' '.join(flags)} failed: {done.stderr[-2000:]}")
    got = json.loads(done.stderr.strip().splitlines()[-1])
    if got["code"]:
        sys.exit(f"{cmd} {' '.join(flags)} failed ({got['code']}): {done.stderr[-2000:]}")
    got["imports_s"] += wall - got["seconds"]  # the interpreter's start, before the child's first line
    return {**got, "wall_s": wall}


def _work_seconds(cal, model: str, cmd: str, flags: list[str], threads: int) -> float:
    """The plan's seconds of ``tlgeo <cmd> <flags>`` priced by ``cal``, less its start-up."""
    from tlgeo.report.plan import plan_table

    df = plan_table(model, cmd, [*flags, "--threads", str(threads)], calib=cal)
    return float(df.set_index("step").loc["total", "seconds"]) - df.attrs["start_seconds"]


def _row(kind: str, value: float, unit: str, how: str, threads: int, machine: str, **fields) -> dict:
    return {
        "device": "cpu",
        "dtype": "any",
        **fields,
        "kind": kind,
        "value": float(value),
        "unit": unit,
        "threads": threads,
        "machine": machine,
        "measured": time.strftime("%Y-%m-%d"),
        "how": how,
    }


def _machine(threads: int, note: str) -> str:
    import platform

    cpu = platform.processor() or "unknown CPU"
    if Path("/proc/cpuinfo").exists():
        cpu = next(
            (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), cpu
        )
    return f"{cpu}, {os.cpu_count()} cores, {threads} thread(s)" + (f", {note}" if note else "")


def _base_rows(threads: int, machine: str) -> list[dict]:
    """Forwards per dtype (``cpu`` and ``cpu-avx2``), each forward's cost per block, the host's FLOP/s."""
    from tlgeo.planner import model_shape

    shape, rows = model_shape(CAL_MODEL), []
    flops = shape.forward_flops(FORWARD_TOKENS, FORWARD_TOKENS)
    for device, env, reps in (("cpu", {}, 3), ("cpu-avx2", NO_HALF_UNITS, 1)):
        done = subprocess.run(
            [sys.executable, "-c", BASE, str(threads), str(FORWARD_TOKENS), str(reps), "float32,bfloat16,float16"],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, **env},
            check=True,
        )
        got = json.loads(done.stdout.strip().splitlines()[-1])
        held = " with oneDNN held to AVX2 (ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2)" if env else ""
        for dtype in ("float32", "bfloat16", "float16"):
            bare = got[dtype] - shape.n_layers * got["block"]
            rows.append(
                _row(
                    "forward.flops",
                    flops / bare,
                    "FLOP/s",
                    f"a bare 1 x {FORWARD_TOKENS}-token {CAL_MODEL} "
                    f"forward ({got[dtype]:.3f} s, less its blocks' fixed cost){held}",
                    threads,
                    machine,
                    device=device,
                    dtype=dtype,
                )
            )
            print(f"{device} {dtype}: bare forward {got[dtype]:.3f} s -> {flops / bare:.3g} FLOP/s", flush=True)
        if device == "cpu":
            rows.append(
                _row(
                    "forward.block",
                    got["block"],
                    "s per block of a forward",
                    "a 1 x 16-token tiny:llama forward over its blocks (its FLOPs are nothing)",
                    threads,
                    machine,
                )
            )
            rows.append(
                _row("host.flop", got["flop64"], "s per FLOP", "a float64 512 x 512 matrix product", threads, machine)
            )
            print(f"forward's fixed cost {got['block'] * 1e3:.2f} ms per block; float64 {1 / got['flop64']:.3g} FLOP/s")
    return rows


def _startup_rows(threads: int, machine: str) -> list[dict]:
    """The imports and each format's load, fixed and per GiB: tiny:llama; a zoo folder and the converted SmolLM2's
    folder (directory); SmolLM2 by name (embedded: its checksums verified besides)."""
    from tlgeo.models import cache_dir
    from tlgeo.planner import model_shape

    models = {
        "tiny": "tiny:llama",
        "small directory": str(REPO / "zoo" / "induction-llama"),
        "directory": str(cache_dir() / CAL_MODEL),
        "embedded": CAL_MODEL,
    }
    got, imports = {}, []
    for what, name in models.items():
        t = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", STARTUP, name, str(threads)], capture_output=True, text=True, cwd=REPO, check=True
        )
        wall = time.perf_counter() - t
        got[what] = json.loads(done.stdout.strip().splitlines()[-1])["load"]
        imports.append(wall - got[what])
        print(f"start-up of {name}: {wall:.2f} s, of which loading {got[what]:.2f} s", flush=True)
    gib = {w: model_shape(n).params * 4 / 2**30 for w, n in models.items()}
    per_gib = (got["directory"] - got["small directory"]) / (gib["directory"] - gib["small directory"])
    fixed = got["small directory"] - gib["small directory"] * per_gib
    emb = (got["embedded"] - fixed) / gib["embedded"]
    how = f"loads of zoo/induction-llama ({gib['small directory']:.3g} GiB) and the converted {CAL_MODEL}'s folder"
    return [
        _row(
            "start.imports",
            statistics.median(imports),
            "s",
            f"a fresh process to tlgeo's parser built (median of {len(imports)})",
            threads,
            machine,
        ),
        _row("start.load.tiny", got["tiny"], "s", "load_model('tiny:llama')", threads, machine),
        _row("start.load.directory", fixed, "s", how, threads, machine),
        _row("start.load.directory.gib", per_gib, "s per GiB", how, threads, machine),
        _row("start.load.embedded", fixed, "s", "as a directory's", threads, machine),
        _row(
            "start.load.embedded.gib",
            emb,
            "s per GiB",
            f"load_model({CAL_MODEL!r}), checksums verified, less a directory's fixed part",
            threads,
            machine,
        ),
    ]


FLOOR_SHARE = -0.9  # a hook's share of a bare forward: at least this (hooks that skip work run below the FLOPs)


def _solve_rows(cal, kinds: list[str], runs: list, threads: int, machine: str) -> tuple[list[dict], list[dict]]:
    """``kinds`` priced by least squares from ``runs``' measured work; also each run's measurement."""
    import numpy as np

    zero = cal
    for k in kinds:
        zero = zero.replace(k, 0.0, threads=threads, unit=cal.row(k, threads=threads)["unit"])
    A, y, seen = [], [], []
    for model, cmd, flags in runs:
        got = _timed_command(model, cmd, flags, threads)
        base = _work_seconds(zero, model, cmd, flags, threads)
        A.append(
            [_work_seconds(zero.replace(k, 1.0, threads=threads), model, cmd, flags, threads) - base for k in kinds]
        )
        y.append(got["work_s"] - base)
        seen.append({**got, "command": f"tlgeo {cmd} --model {model} {' '.join(flags)}", "planned_rest_s": base})
        print(
            f"  {cmd} {' '.join(flags)}: work {got['work_s']:.2f} s, the plan without {kinds} {base:.2f} s "
            f"(start-up: imports {got['imports_s']:.2f} s, load {got['load_s']:.2f} s)",
            flush=True,
        )
    A, y = np.asarray(A, float), np.asarray(y, float)
    scale = np.linalg.norm(A, axis=0)
    scale[scale == 0] = 1
    values = np.linalg.lstsq(A / scale, y, rcond=None)[0] / scale
    how = (
        f"least squares over {len(runs)} commands ({runs[0][1]}: --classes and --tokens vary)"
        if len(runs) > 1
        else f"from {seen[0]['command']}"
    )
    rows = []
    for k, v in zip(kinds, values):
        unit = cal.row(k, threads=threads)["unit"]
        floor = FLOOR_SHARE if unit.startswith("share") else 0.0  # no work takes negative seconds
        note = f" (solved {v:.4g}, below {floor:g}: the rest of the plan exceeds the measurement)" if v < floor else ""
        rows.append(_row(k, max(v, floor), unit, how + note, threads, machine))
        print(f"{k} = {max(v, floor):.4g} {unit}{note}", flush=True)
    return rows, seen


def _atlas_rows(cal, threads: int, machine: str) -> list[dict]:
    """``run.<analysis>`` (each atlas step's time less its plan), ``atlas.report`` (the atlas's work less its
    steps) and ``atlas.memory`` (its peak resident memory less its plan's) from one tiny atlas (:data:`ATLAS_MODEL`),
    and ``run.any`` (their median: an analysis not measured)."""
    import pandas as pd

    from tlgeo.report.plan import plan_table
    from tlgeo.report.registry import load_steps

    out = Path(tempfile.mkdtemp(prefix="bench-plan-atlas-"))
    got = _timed_command(ATLAS_MODEL, "atlas", [], threads, out=out)
    timings = pd.read_csv(out / "timings.csv")
    steps, peak = timings.groupby("step")["seconds"].last(), timings["peak_rss_mb_so_far"].max() / 1024
    shutil.rmtree(out, ignore_errors=True)
    names = {name: step.analysis.name for name, step in load_steps().items()}
    zero = cal
    for kind in {*(f"run.{a}" for a in names.values()), "run.any", "atlas.report", "atlas.memory"}:
        zero = zero.replace(kind, 0.0, threads=threads)
    df = plan_table(ATLAS_MODEL, "atlas", ["--threads", str(threads)], calib=zero)
    planned_peak = float(df.set_index("step").loc["total", "peak_gib"])
    fixed: dict[str, list[float]] = {}
    for name, seconds in steps.items():
        planned = df[df["step"].str.startswith(f"{name}: ")]["seconds"].sum()
        fixed.setdefault(names[name], []).append(max(0.0, seconds - planned))
        print(f"  atlas step {name}: {seconds:.2f} s, planned without its fixed work {planned:.2f} s", flush=True)
    how = f"the step times of tlgeo atlas --model {ATLAS_MODEL} (each step's time less its plan)"
    rows = [_row(f"run.{a}", statistics.mean(v), "s per run", how, threads, machine) for a, v in fixed.items()]
    rows.append(
        _row(
            "run.any",
            statistics.median(r["value"] for r in rows),
            "s per run",
            "the median of the analyses' run.<name>",
            threads,
            machine,
        )
    )
    report = got["work_s"] - steps.sum()
    rows.append(
        _row(
            "atlas.report",
            report,
            "s",
            f"tlgeo atlas --model {ATLAS_MODEL}: its work less its steps' times",
            threads,
            machine,
        )
    )
    rows.append(
        _row(
            "atlas.memory",
            max(0.0, peak - planned_peak),
            "GiB",
            f"tlgeo atlas --model {ATLAS_MODEL}: "
            f"its peak resident memory ({peak:.3f} GiB) less its plan's without it ({planned_peak:.3f} GiB): "
            "its steps' modules",
            threads,
            machine,
        )
    )
    print(
        f"atlas: work {got['work_s']:.2f} s, steps {steps.sum():.2f} s -> report {report:.2f} s; peak "
        f"{peak:.3f} GiB, planned {planned_peak:.3f} GiB without the atlas's own",
        flush=True,
    )
    return rows


def _unit_rows(kind: str, seen: list[dict], runs: list, threads: int, machine: str) -> list[dict]:
    """pdsf's seconds per prompt of a unit (only their ratios matter: dealing units to ranks), from its
    calibration command's work: the geometry stage's, or the generation's (at 16 new tokens)."""
    from tlgeo.pdsf.config import PDSFConfig
    from tlgeo.report.plan import _parse
    from tlgeo.runner.cliargs import config_from_args

    (_model, cmd, flags), got = runs[0], seen[0]
    cfg = config_from_args(PDSFConfig, _parse(cmd, flags))
    unit = "s per prompt (ratios: dealing units to ranks)"
    if kind == "pdsf.geometry_fit":
        prompts = len(cfg.geometry_prompts())
        return [
            _row(
                "pdsf.unit.geometry",
                got["work_s"] / prompts,
                unit,
                f"{got['command']}: its work over its {prompts} prompts",
                threads,
                machine,
            )
        ]
    prompts = len(cfg.generation_prompts())
    per = got["work_s"] / prompts * 16 / cfg.new_tokens
    return [
        _row(
            "pdsf.unit.generation",
            per,
            unit,
            f"{got['command']}: its work over its {prompts} prompts",
            threads,
            machine,
        ),
        _row(
            "pdsf.unit.single_pass",
            per * 0.30 / 0.39,
            unit,
            "0.77 x the generation's (their ratio measured before this table; not measured here)",
            threads,
            machine,
        ),
    ]


def calibrate(threads: int, only: list[str] | None, note: str, path: Path, keep_threads: bool = False) -> None:
    """Measure the planner's calibration table at ``threads`` and write it to ``path`` (``only``: these parts, the
    others' rows kept as they are; the rows of other thread counts dropped unless ``keep_threads``)."""
    from tlgeo.planner import Calibration

    parts = ["base", "startup", "solve", "atlas"]
    unknown = set(only or ()) - {*parts, *(k for kinds, _ in SOLVE for k in kinds)}
    if unknown:
        sys.exit(f"--only: unknown part(s) {sorted(unknown)}; choose from {parts} or a kind of SOLVE")
    cal, machine, t0 = Calibration.read(path), _machine(threads, note), time.perf_counter()
    if not keep_threads:  # one machine's table: the rows of other thread counts go (and with them a default plan's)
        cal = Calibration(tuple(r for r in cal.rows if r["threads"] == threads))

    def keep(rows):
        nonlocal cal
        for r in rows:
            cal = cal.replace(r["kind"], r["value"], **{k: v for k, v in r.items() if k not in ("kind", "value")})
        cal.write(path)  # after every part: an interrupted calibration keeps what it measured

    if not only or "base" in only:
        keep(_base_rows(threads, machine))
    if not only or "startup" in only:
        keep(_startup_rows(threads, machine))
    if not only or "atlas" in only:  # before SOLVE: its commands' work includes their run's fixed work
        keep(_atlas_rows(cal, threads, machine))
    for kinds, runs in SOLVE:
        if not only or "solve" in only or set(kinds) & set(only):
            rows, seen = _solve_rows(cal, kinds, runs, threads, machine)
            keep(rows)
            if kinds[0] in ("pdsf.geometry_fit", "pdsf.generation_call"):
                keep(_unit_rows(kinds[0], seen, runs, threads, machine))
    print(f"wrote {path} in {time.perf_counter() - t0:.0f} s")


def memory() -> None:
    """The planner's memory constants (tlgeo.planner: CPU_PROCESS_GIB, LOGIT_COPIES, PPL_LOGIT_COPIES), printed."""
    import torch

    from tlgeo.models import load_model
    from tlgeo.planner import ACTIVATION_FLOATS, model_shape

    print(f"process before the model: {_rss_gib():.2f} GiB (CPU_PROCESS_GIB)")
    model = load_model("smollm2-135m")
    shape = model_shape("smollm2-135m")
    toks = torch.randint(0, shape.vocab, (4, 256))
    with torch.no_grad():
        model(toks[:1, :8])  # every weight touched: resident
        resident = _rss_gib()
        model(toks)
        forward = _rss_gib() - resident
    print(
        f"resident with its weights: {resident:.2f} GiB -> the process less the weights "
        f"{resident - shape.params * 4 / 2**30:.2f} GiB (CPU_PROCESS_GIB); one 4 x 256 forward adds "
        f"{forward:.2f} GiB"
    )
    every = ("attn", "mlp", "block", "value_full", "value_excl_self")
    step = {
        "profile": "profile_summary_table(m, t, corpus='wikitext2', max_tokens=1024, seq_len=256, "
        f"sites={every!r}, batch_size=4)",
        "perplexity": "perplexity(m, m.to_tokens(t[:40000])[0, :2048], context=512, batch_size=4)",
    }
    d_part = (ACTIVATION_FLOATS * shape.d_model + shape.d_mlp) * 4 / 2**30
    copy = shape.vocab * 4 / 2**30
    print(f"  = {(forward / 1024 - d_part) / copy:.2f} [tokens, vocab] float32 arrays (LOGIT_COPIES)")
    for (name, call), live in zip(
        step.items(), (1024, 2048)
    ):  # fresh processes: peaks only grow, freed memory is reused
        got = _fresh_peak(call)
        print(
            f"{name} of {live} tokens (4 windows) adds {got:.2f} GiB to the resident model = "
            f"{(got / live - d_part) / copy:.2f} [tokens, vocab] arrays ({'PROFILE' if name == 'profile' else 'PPL'}"
            "_LOGIT_COPIES)"
        )
    print(f"peak resident memory: {_rss_gib():.2f} GiB")


def _setup(model: str, cmd: str) -> None:
    """``SETUP[cmd]`` for ``model`` in a fresh process, unmeasured (its results in a temporary folder)."""
    out = Path(tempfile.mkdtemp(prefix="bench-plan-setup-"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tlgeo",
            *SETUP[cmd][:1],
            "--model",
            model,
            *SETUP[cmd][1:],
            "--threads",
            "2",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    shutil.rmtree(out, ignore_errors=True)
    if done.returncode:
        sys.exit(f"setting up {cmd} ({' '.join(SETUP[cmd])}) failed: {done.stderr[-2000:]}")


# a CPU without bfloat16 / float16 matrix units (no AMX, no AVX512-BF16 / -FP16), emulated on one that has them
NO_HALF_UNITS = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}

BARE = r"""
import statistics, sys, time, torch
from tlgeo.models import load_model
torch.set_num_threads(int(sys.argv[1]))
m, toks = load_model("smollm2-135m"), torch.randint(0, 49152, (1, 256))
with torch.no_grad():
    m(toks)
    out = []
    for _ in range(3):
        t = time.perf_counter(); m(toks); out.append(time.perf_counter() - t)
print(statistics.median(out))
"""


def machine_factor(threads: int) -> float:
    """This machine's bare 1 x 256-token SmolLM2 forward (``threads``, a fresh process) over the calibration
    table's: machines of this kind differ ~2x and more, and the planner's CPU times are the calibration machine's."""
    from tlgeo.planner import DEVICES, calibration, model_shape

    done = subprocess.run(
        [sys.executable, "-c", BARE, str(threads)], capture_output=True, text=True, cwd=REPO, check=True
    )
    bare = float(done.stdout.strip().splitlines()[-1])
    shape, cal = model_shape("smollm2-135m"), calibration()
    planned = shape.forward_flops(256, 256) / DEVICES["cpu"].forward_flops(
        "float32", threads, cal
    ) + shape.n_layers * cal.value("forward.block", threads=threads)
    print(
        f"bare 1 x 256 SmolLM2 forward: {bare:.2f} s here, {planned:.2f} s planned: this machine "
        f"{bare / planned:.2f}x the calibration machine (the 'ratio/m' column divides by it)"
    )
    return bare / planned


def check(runs: list[tuple[str, str, list[str]]], out: Path | None = None, threads: int = 1) -> None:
    from tlgeo.models import UnknownModelError
    from tlgeo.planner import model_shape
    from tlgeo.report.plan import plan_table

    factor = machine_factor(threads)
    rows = []
    print(
        f"{'model':>14} {'command':>13} | {'predicted s':>11} {'measured s':>10} {'ratio':>6} {'ratio/m':>7} | "
        f"{'pred GiB':>8} {'meas GiB':>8} {'ratio':>6}"
    )
    for model, cmd, flags in runs:
        try:
            shape = model_shape(model)
        except UnknownModelError as e:
            print(f"{model:>14} {cmd:>13} | skipped: {e}")
            continue
        if cmd in SETUP:
            _setup(model, cmd)
        total = plan_table(shape, cmd, [*flags, "--threads", str(threads)]).set_index("step").loc["total"]
        # the start-up included, as `tlgeo plan` prints it
        pred_s = total["seconds"]
        scratch = Path(tempfile.mkdtemp(prefix="bench-plan-"))  # fresh: nothing to resume
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                CHILD,
                cmd,
                "--model",
                model,
                *flags,
                "--threads",
                str(threads),
                "--out",
                str(scratch),
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        shutil.rmtree(scratch, ignore_errors=True)
        if done.returncode:
            sys.exit(f"{cmd} failed: {done.stderr[-2000:]}")
        got = json.loads(done.stderr.strip().splitlines()[-1])
        ratio = got["seconds"] / pred_s
        print(
            f"{model:>14} {cmd:>13} | {pred_s:11.1f} {got['seconds']:10.1f} {ratio:6.2f} {ratio / factor:7.2f} | "
            f"{total['peak_gib']:8.2f} {got['peak_gib']:8.2f} {got['peak_gib'] / total['peak_gib']:6.2f}",
            flush=True,
        )
        rows.append(
            dict(
                model=model,
                command=cmd,
                flags=" ".join(flags),
                predicted_s=pred_s,
                measured_s=got["seconds"],
                ratio=ratio,
                machine_factor=factor,
                ratio_over_machine=ratio / factor,
                predicted_gib=total["peak_gib"],
                measured_gib=got["peak_gib"],
                memory_ratio=got["peak_gib"] / total["peak_gib"],
            )
        )
        if out is not None:  # after every command: an interrupted check keeps what it measured
            import pandas as pd

            from tlgeo.runner.provenance import record

            out.mkdir(parents=True, exist_ok=True)
            pd.DataFrame(rows).to_csv(out / "plan_vs_measured.csv", index=False)
    if out is not None:
        record(out, ["scripts/bench_plan.py", *sys.argv[1:]], {"runs": [list(r[:2]) + [" ".join(r[2])] for r in runs]})
        print(f"wrote {out / 'plan_vs_measured.csv'}")


TIME_WITHIN, MEMORY_WITHIN = 2.0, 0.25  # the planner's targets: time within 2x, peak memory within 25 %


def markdown_table(table) -> str:
    """The docs' table of a ``plan_vs_measured.csv`` (a DataFrame): one row per command, measured over predicted,
    then a line that counts the commands within the targets (``docs/cli.md`` prints it; a test compares)."""
    lines = ["| model | command | time | ÷ machine | peak memory |", "|---|---|---|---|---|"]
    for r in table.itertuples():
        flags = f" {r.flags}" if isinstance(r.flags, str) and r.flags else ""
        lines.append(
            f"| {r.model} | `{r.command}{flags}` | {r.ratio:.2f}× | {r.ratio_over_machine:.2f}× | "
            f"{r.memory_ratio:.2f}× |"
        )
    within = lambda x, lo, hi: int(((x >= lo) & (x <= hi)).sum())  # noqa: E731
    n = len(table)
    t = within(table["ratio"], 1 / TIME_WITHIN, TIME_WITHIN)
    tm = within(table["ratio_over_machine"], 1 / TIME_WITHIN, TIME_WITHIN)
    m = within(table["memory_ratio"], 1 - MEMORY_WITHIN, 1 + MEMORY_WITHIN)
    lines += [
        "",
        f"Time within {TIME_WITHIN:g}× in {t} of {n} commands ({tm} of {n} divided by the machine factor "
        f"{float(table['machine_factor'].iloc[0]):.2f}); peak memory within {100 * MEMORY_WITHIN:g} % in "
        f"{m} of {n} ({table['memory_ratio'].min():.2f}–{table['memory_ratio'].max():.2f}×).",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calibrate", action="store_true", help="measure the planner's calibration table and write it")
    p.add_argument("--threads", type=int, default=1, help="torch threads of every measurement (default 1)")
    p.add_argument("--note", default="", help="--calibrate: a note on the machine, kept in the table ('quiet')")
    p.add_argument(
        "--calibration",
        type=Path,
        default=REPO / "tlgeo" / "planner_calibration.csv",
        help="--calibrate: the table written",
    )
    p.add_argument(
        "--keep-threads",
        action="store_true",
        help="--calibrate: keep the table's rows of other thread counts (measured on this machine at those counts)",
    )
    p.add_argument("--memory", action="store_true", help="print the planner's memory constants")
    p.add_argument(
        "--pair",
        metavar="DIR",
        help="check the trained pair in DIR (<DIR>/gpt/model, <DIR>/llama/model) instead of the other models",
    )
    p.add_argument("--short", action="store_true", help="check SHORT_RUNS instead of RUNS")
    p.add_argument(
        "--only",
        metavar="NAMES",
        help="comma-separated commands of RUNS to check (default: all); with "
        "--calibrate, parts (base, startup, solve, atlas) or kinds of SOLVE to measure",
    )
    p.add_argument("--out", type=Path, help="also write plan_vs_measured.csv (and provenance.jsonl) into this folder")
    p.add_argument("--table", type=Path, metavar="CSV", help="print the Markdown table of a plan_vs_measured.csv")
    a = p.parse_args()
    if a.table is not None:
        import pandas as pd

        print(markdown_table(pd.read_csv(a.table)))
    elif a.calibrate:
        calibrate(a.threads, a.only.split(",") if a.only else None, a.note, a.calibration, a.keep_threads)
    elif a.memory:
        memory()
    else:
        runs = (
            (SHORT_RUNS if a.short else RUNS)
            if a.pair is None
            else [
                (str(Path(a.pair) / arch / "model"), cmd, flags)
                for arch in ("gpt", "llama")
                for cmd, flags in PAIR_RUNS
            ]
        )
        check([r for r in runs if not a.only or r[1] in a.only.split(",")], a.out, a.threads)
