"""Overhead of value-space exclude-self edits at every layer vs the bare bridge forward.

Side by side in one run, on the same tokens (default SmolLM2, batch 4 x 256):
  bare      model(tokens)
  noop      exclude-self hooks at all layers, s_par = s_perp = 1
  remove    exclude-self hooks at all layers, s_par = 0
Timings are interleaved (the order rotates each round) and summarised by the
median: median(edit) / median(bare), and the median of per-round ratios. The
time spent inside the hook functions is measured too, as a share of the bare
forward: it is the overhead with the machine's timing noise taken out. Edit hooks are attached once
with ``model.hooks()`` around the timed forwards (as in a sweep), so the
timing is the hooks' compute, not hook registration. Peak memory: the RSS
high-water mark of one forward per mode (reset between modes, Linux).

    python scripts/bench_overhead.py [--model smollm2-135m] [--batch 4] [--seq 256] [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

MODES = ("bare", "noop", "remove")


def hooks_for(model, mode: str):
    from tlgeo.hooks.edits import edit_hooks

    if mode == "bare":
        return []
    return edit_hooks(model, "value_excl_self", 1.0 if mode == "noop" else 0.0)


def time_in_hooks(model, tokens, hooks, repeats: int = 3) -> float:
    """Median seconds per forward spent inside the hook functions themselves."""
    spent = [0.0]

    def timed(fn):
        def wrapper(x, hook):
            t = time.perf_counter()
            out = fn(x, hook)
            spent[0] += time.perf_counter() - t
            return out

        return wrapper

    wrapped = [(name, timed(fn)) for name, fn in hooks]
    per_run = []
    for _ in range(repeats):
        spent[0] = 0.0
        run_once(model, tokens, wrapped)
        per_run.append(spent[0])
    return statistics.median(per_run)


def make_tokens(model, args) -> torch.Tensor:
    """``[batch, seq]`` real text (WikiText-2 test) cut into windows."""
    from tlgeo.data import load_text
    from tlgeo.decomposition.observe import corpus_batches

    toks = corpus_batches(model, load_text("wikitext2"), args.seq, max_tokens=args.batch * args.seq + 16)
    return toks[: args.batch]


def run_once(model, tokens, hooks) -> float:
    with torch.inference_mode(), model.hooks(fwd_hooks=hooks):
        t = time.perf_counter()
        model(tokens)
        return time.perf_counter() - t


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def peak_memory_mib(model, tokens, hooks) -> tuple[float, float]:
    """(peak RSS during one forward, its increase over the RSS before), MiB.

    Resets the kernel's high-water mark first (``/proc/self/clear_refs``), so
    each mode gets its own peak within one process.
    """
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _status_kib("VmRSS")
    run_once(model, tokens, hooks)
    peak = _status_kib("VmHWM")
    return peak / 1024, (peak - before) / 1024


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()

    from tlgeo.models import load_model

    torch.set_num_threads(args.threads)
    model = load_model(args.model)
    tokens = make_tokens(model, args)
    hooks = {m: hooks_for(model, m) for m in MODES}
    with torch.inference_mode():  # the edit is real: s_par = 0 changes the logits
        assert not torch.equal(model(tokens[:1, :32]), model.run_with_hooks(tokens[:1, :32], fwd_hooks=hooks["remove"]))
    for m in MODES:  # warm-up
        run_once(model, tokens, hooks[m])
    times = {m: [] for m in MODES}
    for r in range(args.repeats):
        order = MODES[r % len(MODES) :] + MODES[: r % len(MODES)]  # rotate who goes first
        for m in order:
            times[m].append(run_once(model, tokens, hooks[m]))
    med = {m: statistics.median(v) for m, v in times.items()}
    # paired: each round's edited time over the same round's bare time
    paired = {m: statistics.median(t / b for t, b in zip(times[m], times["bare"])) for m in MODES}
    in_hooks = {m: time_in_hooks(model, tokens, hooks[m]) for m in MODES}

    peaks = {m: peak_memory_mib(model, tokens, hooks[m]) for m in MODES}

    print(
        f"model {args.model}, batch {args.batch} x {args.seq}, {args.threads} threads, {args.repeats} "
        "interleaved repeats"
    )
    print(
        f"{'mode':>8} {'median s':>9} {'ratio':>7} {'paired':>7} {'in hooks':>9} {'peak RSS MiB':>13} "
        f"{'forward adds MiB':>17}"
    )
    for m in MODES:
        print(
            f"{m:>8} {med[m]:9.3f} {med[m] / med['bare']:7.3f} {paired[m]:7.3f} "
            f"{in_hooks[m] / med['bare']:8.2%} {peaks[m][0]:13.0f} {peaks[m][1]:17.0f}"
        )
    print(
        "ratio: median/median; paired: median of per-round ratios; in hooks: time inside the hook "
        "functions as a share of the bare forward"
    )
    print(
        json.dumps(
            {
                "median_s": med,
                "ratio": {m: med[m] / med["bare"] for m in MODES},
                "paired_ratio": paired,
                "in_hooks_share": {m: in_hooks[m] / med["bare"] for m in MODES},
                "peak_rss_mib": {m: peaks[m][0] for m in MODES},
                "forward_adds_mib": {m: peaks[m][1] for m in MODES},
            }
        )
    )


if __name__ == "__main__":
    main()
