"""The planner against measured runs, side by side on this machine (run nothing else meanwhile).

    .venv/bin/python scripts/bench_plan.py --calibrate   # the constants tlgeo.planner and the analyses' plans use
    .venv/bin/python scripts/bench_plan.py               # predicted vs measured time and peak memory per command
    .venv/bin/python scripts/bench_plan.py --table results/plan-smollm2-135m/plan_vs_measured.csv   # its Markdown

``--calibrate`` measures on SmolLM2-135M (float32, 2 threads): the resident memory of a process that
has imported tlgeo's stack, the FLOP/s of a bare 4 x 256-token forward, and the time of a profile
and of an edited perplexity pass over a bare forward of the same tokens. The default mode times a
bare forward here first, then runs each command of :data:`RUNS` in a fresh process and prints
measured / predicted wall time (the prediction includes the start: imports and loading), that ratio
divided by this machine's speed against the calibration machine's (``ratio/m``), and peak resident
memory (the targets: time within 2x, memory within 25 %); a command of :data:`SETUP`
(compression's compressed models) runs first, unmeasured. The calibration settings and the
checked runs differ.
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
    ("smollm2-135m", "pdsf", ["--geometry-per-group", "4", "--single-pass-per-group", "1", "--per-group", "1",
                              "--new-tokens", "16", "--repeats", "1", "--conditions", "D,S,random"]),
    ("gemma3-270m", "pdsf", ["--geometry-per-group", "2", "--single-pass-per-group", "1", "--per-group", "1",
                             "--new-tokens", "16", "--repeats", "1", "--conditions", "D,random"]),
    ("smollm2-135m", "tokenwise", ["--tokens", "2048", "--seq-len", "64", "--classes", "diag_psd,linear,global",
                                   "--patch-tokens", "16", "--patch-layer-count", "3", "--n-boot", "200"]),
    ("gemma3-270m", "tokenwise", ["--tokens", "1024", "--seq-len", "64", "--classes", "linear,global",
                                  "--patch-tokens", "16", "--patch-layer-count", "2", "--n-boot", "200"]),
    ("smollm2-135m", "dirmag", ["--sentences", "64", "--seeds", "1", "--absolute-deltas", "5", "--norm-fractions",
                                "0.5", "--blimp-pairs", "8", "--probe-sentences", "40", "--probe-layer-count", "3"]),
    ("smollm2-135m", "geometries", ["--tokens", "2048", "--layer-count", "3", "--seeds", "1"]),
    ("smollm2-135m", "compression", ["--methods", "wanda,wanda_2_4"]),  # 12 prompts x 128 tokens
    ("smollm2-135m", "patching", ["--tasks", "ioi", "--prompts", "8", "--exact-components", "head,head_par"]),
    ("smollm2-135m", "sweeps", ["--tokens", "512", "--context", "256", "--s-par-grid", "0,0.5,2", "--s-perp-grid", "0,2"]),
    ("smollm2-135m", "compare", ["--tokens", "512", "--context", "256", "--zeroshot-limit", "10", "--ruler-samples", "1",
                                 "--ruler-sites", "value_excl_self"]),
    ("smollm2-135m", "heads", ["--texts", "4", "--length", "128"]),
    ("smollm2-135m", "mlp-carrier", ["--tokens", "512", "--context", "256"]),
    ("smollm2-135m", "closed-form", ["--tokens", "128"]),
    ("smollm2-135m", "audit", ["--tokens", "512"]),
]
# the trained LayerNorm / RMSNorm pair (scripts/train_norm_pair.py's checkpoints, not in the repository:
# --pair DIR checks these instead of RUNS; only the models' shape matters, so a smoke run's checkpoints do)
PAIR_RUNS = [(c, f) for m, c, f in RUNS if m == "smollm2-135m" and c in ("decompose", "pdsf", "dirmag")]  # SmolLM2's flags
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
    done = subprocess.run([sys.executable, "-c", FRESH.replace("CALL", call)], capture_output=True, text=True,
                          cwd=REPO, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def calibrate() -> None:
    import torch

    from tlgeo.data import load_text
    from tlgeo.decomposition.analysis import profile_summary_table
    from tlgeo.evals.perplexity import perplexity
    from tlgeo.hooks.edits import edit
    from tlgeo.models import load_model
    from tlgeo.planner import ACTIVATION_FLOATS, model_shape

    torch.set_num_threads(2)
    print(f"process before the model: {_rss_gib():.2f} GiB (CPU_PROCESS_GIB)")
    model = load_model("smollm2-135m")
    shape = model_shape("smollm2-135m")
    print(f"after booting the model: {_rss_gib():.2f} GiB, less its float32 weights "
          f"{_rss_gib() - shape.params * 4 / 2**30:.2f} GiB (CPU_PROCESS_GIB)")
    toks = torch.randint(0, shape.vocab, (4, 256))

    def timed(fn, n=3):
        fn()
        out = []
        for _ in range(n):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
        return statistics.median(out)

    with torch.no_grad():
        model(toks[:1, :8])  # every weight touched: resident
        resident = _rss_gib()
        model(toks)
        forward = _rss_gib() - resident
        bare = timed(lambda: model(toks))
    print(f"resident with its weights: {resident:.2f} GiB -> the process less the weights "
          f"{resident - shape.params * 4 / 2**30:.2f} GiB (CPU_PROCESS_GIB); one 4 x 256 forward adds "
          f"{forward:.2f} GiB")
    flops = shape.forward_flops(4 * 256, 256)
    print(f"bare 4 x 256 forward: {bare:.2f} s = {flops / bare:.3g} FLOP/s (CPU_FLOPS)")
    for name, env in (("CPU_DTYPE_SLOWDOWN", {}), ("CPU_NO_HALF_UNITS_SLOWDOWN", NO_HALF_UNITS)):
        got = json.loads(subprocess.run([sys.executable, "-c", DTYPES], capture_output=True, text=True, cwd=REPO,
                                        check=True, env={**os.environ, **env}).stdout.strip().splitlines()[-1])
        print(f"bare forward per dtype{' with oneDNN held to AVX2' if env else ''}: "
              + ", ".join(f"{d} {t:.2f} s = {t / got['float32']:.2f}x" for d, t in got.items()) + f" ({name})")
    text = load_text("wikitext2")
    every = ("attn", "mlp", "block", "value_full", "value_excl_self")
    step = {"profile": "profile_summary_table(m, t, corpus='wikitext2', max_tokens=1024, seq_len=256, "
                       f"sites={every!r}, batch_size=4)",
            "perplexity": "perplexity(m, m.to_tokens(t[:40000])[0, :2048], context=512, batch_size=4)"}
    d_part = (ACTIVATION_FLOATS * shape.d_model + shape.d_mlp) * 4 / 2**30
    copy = shape.vocab * 4 / 2**30
    print(f"  = {(forward / 1024 - d_part) / copy:.2f} [tokens, vocab] float32 arrays (LOGIT_COPIES)")
    for (name, call), live in zip(step.items(), (1024, 2048)):  # fresh processes: peaks only grow, freed memory is reused
        got = _fresh_peak(call)
        print(f"{name} of {live} tokens (4 windows) adds {got:.2f} GiB to the resident model = "
              f"{(got / live - d_part) / copy:.2f} [tokens, vocab] arrays ({'PROFILE' if name == 'profile' else 'PPL'}"
              "_LOGIT_COPIES)")
    ids = model.to_tokens(text[:20000])[0, :1024]
    per_site = {}
    for sites in (("attn",), every):
        t = timed(lambda: profile_summary_table(model, text, corpus="wikitext2", max_tokens=512, seq_len=256,
                                                sites=sites, batch_size=2), n=1)
        per_site[len(sites)] = t / (bare / 2)  # 512 tokens = half the bare forward's
    slope = (per_site[5] - per_site[1]) / 4
    print(f"profile of 512 tokens over a bare forward: 1 site {per_site[1]:.2f}x, 5 sites {per_site[5]:.2f}x "
          f"-> {slope:.2f} per site, {per_site[1] - slope:.2f} at none (PROFILE_OVERHEAD_PER_SITE)")
    plain = timed(lambda: perplexity(model, ids, context=256, batch_size=4), n=1)
    with edit(model, "attn", s_perp=0.0, skip_first=1):
        edited = timed(lambda: perplexity(model, ids, context=256, batch_size=4), n=1)
    print(f"edited perplexity pass over the plain one: {edited / plain:.3f}x (EDIT_OVERHEAD)")
    t = time.perf_counter()
    load_model("smollm2-135m")
    print(f"a second load of the model: {time.perf_counter() - t:.1f} s (LOAD_GIB_PER_S: "
          f"{shape.params * 4 / 2**30 / (time.perf_counter() - t):.2f})")
    print(f"peak resident memory of this calibration: {_rss_gib():.2f} GiB")


def _setup(model: str, cmd: str) -> None:
    """``SETUP[cmd]`` for ``model`` in a fresh process, unmeasured (its results in a temporary folder)."""
    out = Path(tempfile.mkdtemp(prefix="bench-plan-setup-"))
    done = subprocess.run([sys.executable, "-m", "tlgeo", *SETUP[cmd][:1], "--model", model, *SETUP[cmd][1:],
                           "--threads", "2", "--out", str(out)], capture_output=True, text=True, cwd=REPO)
    shutil.rmtree(out, ignore_errors=True)
    if done.returncode:
        sys.exit(f"setting up {cmd} ({' '.join(SETUP[cmd])}) failed: {done.stderr[-2000:]}")


DTYPES = r"""
import json, statistics, time, torch
from tlgeo.models import load_model
torch.set_num_threads(2)
toks, times = torch.randint(0, 49152, (4, 256)), {}
for dtype in ("float32", "bfloat16", "float16"):  # the weights cast; one model at a time
    m = load_model("smollm2-135m", dtype=dtype)
    with torch.no_grad():
        m(toks)
        out = []
        for _ in range(3):
            t = time.perf_counter(); m(toks); out.append(time.perf_counter() - t)
    times[dtype] = statistics.median(out)
    del m
print(json.dumps(times))
"""
# a CPU without bfloat16 / float16 matrix units (no AMX, no AVX512-BF16 / -FP16), emulated on one that has them
NO_HALF_UNITS = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}

BARE = r"""
import statistics, time, torch
from tlgeo.models import load_model
torch.set_num_threads(2)
m, toks = load_model("smollm2-135m"), torch.randint(0, 49152, (4, 256))
with torch.no_grad():
    m(toks)
    out = []
    for _ in range(3):
        t = time.perf_counter(); m(toks); out.append(time.perf_counter() - t)
print(statistics.median(out))
"""


def machine_factor() -> float:
    """This machine's bare 4 x 256-token SmolLM2 forward (2 threads, a fresh process) over the
    planner's (its FLOPs at ``CPU_FLOPS``): machines of this kind differ ~2x and more, and the
    planner's CPU times are the calibration machine's."""
    from tlgeo.planner import CPU_FLOPS, model_shape

    done = subprocess.run([sys.executable, "-c", BARE], capture_output=True, text=True, cwd=REPO, check=True)
    bare = float(done.stdout.strip().splitlines()[-1])
    planned = model_shape("smollm2-135m").forward_flops(4 * 256, 256) / CPU_FLOPS
    print(f"bare 4 x 256 SmolLM2 forward: {bare:.2f} s here, {planned:.2f} s planned: this machine "
          f"{bare / planned:.2f}x the calibration machine (the 'ratio/m' column divides by it)")
    return bare / planned


def check(runs: list[tuple[str, str, list[str]]], out: Path | None = None) -> None:
    from tlgeo.models import UnknownModelError
    from tlgeo.planner import model_shape
    from tlgeo.report.plan import plan_table

    factor = machine_factor()
    rows = []
    print(f"{'model':>14} {'command':>13} | {'predicted s':>11} {'measured s':>10} {'ratio':>6} {'ratio/m':>7} | "
          f"{'pred GiB':>8} {'meas GiB':>8} {'ratio':>6}")
    for model, cmd, flags in runs:
        try:
            shape = model_shape(model)
        except UnknownModelError as e:
            print(f"{model:>14} {cmd:>13} | skipped: {e}")
            continue
        if cmd in SETUP:
            _setup(model, cmd)
        total = plan_table(shape, cmd, flags).set_index("step").loc["total"]  # the start included, as `tlgeo plan`
        pred_s = total["seconds"]
        scratch = Path(tempfile.mkdtemp(prefix="bench-plan-"))  # fresh: nothing to resume
        done = subprocess.run([sys.executable, "-c", CHILD, cmd, "--model", model, *flags, "--threads", "2",
                               "--out", str(scratch)], capture_output=True, text=True, cwd=REPO)
        shutil.rmtree(scratch, ignore_errors=True)
        if done.returncode:
            sys.exit(f"{cmd} failed: {done.stderr[-2000:]}")
        got = json.loads(done.stderr.strip().splitlines()[-1])
        ratio = got["seconds"] / pred_s
        print(f"{model:>14} {cmd:>13} | {pred_s:11.1f} {got['seconds']:10.1f} {ratio:6.2f} {ratio / factor:7.2f} | "
              f"{total['peak_gib']:8.2f} {got['peak_gib']:8.2f} {got['peak_gib'] / total['peak_gib']:6.2f}",
              flush=True)
        rows.append(dict(model=model, command=cmd, flags=" ".join(flags), predicted_s=pred_s, measured_s=got["seconds"],
                         ratio=ratio, machine_factor=factor, ratio_over_machine=ratio / factor,
                         predicted_gib=total["peak_gib"], measured_gib=got["peak_gib"],
                         memory_ratio=got["peak_gib"] / total["peak_gib"]))
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
        lines.append(f"| {r.model} | `{r.command}{flags}` | {r.ratio:.2f}× | {r.ratio_over_machine:.2f}× | "
                     f"{r.memory_ratio:.2f}× |")
    within = lambda x, lo, hi: int(((x >= lo) & (x <= hi)).sum())  # noqa: E731
    n = len(table)
    t = within(table["ratio"], 1 / TIME_WITHIN, TIME_WITHIN)
    tm = within(table["ratio_over_machine"], 1 / TIME_WITHIN, TIME_WITHIN)
    m = within(table["memory_ratio"], 1 - MEMORY_WITHIN, 1 + MEMORY_WITHIN)
    lines += ["", f"Time within {TIME_WITHIN:g}× in {t} of {n} commands ({tm} of {n} divided by the machine factor "
                  f"{float(table['machine_factor'].iloc[0]):.2f}); peak memory within {100 * MEMORY_WITHIN:g} % in "
                  f"{m} of {n} ({table['memory_ratio'].min():.2f}–{table['memory_ratio'].max():.2f}×)."]
    return "\n".join(lines)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calibrate", action="store_true")
    p.add_argument("--pair", metavar="DIR", help="check the trained pair in DIR (<DIR>/gpt/model, <DIR>/llama/model) "
                   "instead of the other models")
    p.add_argument("--only", metavar="CMDS", help="comma-separated commands of RUNS to check (default: all)")
    p.add_argument("--out", type=Path, help="also write plan_vs_measured.csv (and provenance.jsonl) into this folder")
    p.add_argument("--table", type=Path, metavar="CSV", help="print the Markdown table of a plan_vs_measured.csv")
    a = p.parse_args()
    if a.table is not None:
        import pandas as pd

        print(markdown_table(pd.read_csv(a.table)))
    elif a.calibrate:
        calibrate()
    else:
        runs = (RUNS if a.pair is None else
                [(str(Path(a.pair) / arch / "model"), cmd, flags) for arch in ("gpt", "llama") for cmd, flags in PAIR_RUNS])
        check([r for r in runs if not a.only or r[1] in a.only.split(",")], a.out)
