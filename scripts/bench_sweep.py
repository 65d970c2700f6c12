"""Sweep engine time vs bare forward passes over the same tokens (target ratio <= 1.05).

Side by side in one run, on the same token windows (default SmolLM2, WikiText-2
test, 2 windows x 256 in one batch):

  sweep   sensitivity_sweep over N edits (every site at s_par = 0, skip_first = 1):
          1 unedited pass + N edited passes, losses included
  bare    N + 1 plain ``model(tokens)`` forwards (no hooks, no loss)
  sweep_skip0  the same sweep with skip_first = 0 (no pass can start after block 0:
          the cost of hooks and losses alone)
  layer   layer_sweep at one late block (default 25) over K scales: 1 unedited pass
          + K passes that start at that block
  bare_k  K + 1 plain forwards
  zeroshot  evaluate_zeroshot on the first --zs-items items of PIQA, ARC-Easy and
          WinoGrande (tokenising, batching, log-softmax and scoring included)
  bare_zs plain forwards of exactly the padded batches the scorer builds

Rounds alternate the order; medians are reported, of wall time and of process
CPU time (all threads; the steadier number on a shared machine).

    python scripts/bench_sweep.py [--model smollm2-135m] [--windows 2] [--seq 256] [--rounds 3] [--layer 25]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def _parse_args() -> argparse.Namespace:
    """The command line: model, window shape, rounds, layer, threads and zero-shot items."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--windows", type=int, default=2)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--layer", type=int, default=25)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--zs-items", type=int, default=20)
    return p.parse_args()


def _token_batch(model, args: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor, int]:
    """WikiText-2 ids ``[n_text]``, their windows ``[windows, seq]`` and ``n_text``."""
    from tlgeo.data import load_text
    from tlgeo.evals.perplexity import token_windows, tokenize_text

    bos = model.tokenizer.bos_token_id if model.cfg.default_prepend_bos else None
    n_text = args.windows * (args.seq - int(bos is not None))
    ids = tokenize_text(model, load_text("wikitext2"), n_text)
    batch = torch.stack([w for w, _ in token_windows(ids, args.seq, bos_token_id=bos)])
    assert batch.shape == (args.windows, args.seq), batch.shape
    return ids, batch, n_text


def _zeroshot_batches(model, tasks: tuple[str, ...], n_items: int) -> list[torch.Tensor]:
    """The scorer's batches ``[<=8, len]``: unique inputs, longest first, 8 per batch, right-padded."""
    from tlgeo.evals.zeroshot import _prefix_token, encode_pair, load_task

    prefix = _prefix_token(model, None)
    zs_batches = []
    for task in tasks:
        uniq = {
            tuple((c + x)[:-1])
            for it in load_task(task, limit=n_items)
            for c, x in (
                encode_pair(model.tokenizer, a, b, prefix_token_id=prefix)
                for a, b in zip(it.contexts, it.continuations)
            )
        }
        order = sorted(uniq, key=len, reverse=True)
        for i in range(0, len(order), 8):
            chunk = order[i : i + 8]
            inp = torch.zeros(len(chunk), len(chunk[0]), dtype=torch.long)
            for r, u in enumerate(chunk):
                inp[r, : len(u)] = torch.tensor(u)
            zs_batches.append(inp)
    return zs_batches


def _time_rounds(jobs: dict, rounds: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall and process CPU seconds per job and round; each round starts one job later."""
    times: dict[str, list[float]] = {k: [] for k in jobs}
    cpu: dict[str, list[float]] = {k: [] for k in jobs}
    order = list(jobs)
    for r in range(rounds):
        for name in order[r % len(order) :] + order[: r % len(order)]:
            t, c = time.perf_counter(), time.process_time()
            jobs[name]()
            times[name].append(time.perf_counter() - t)
            cpu[name].append(time.process_time() - c)
    return times, cpu


def _summary(args, shape: list[int], n_edits: int, n_scales: int, n_zs_items: int, n_zs_batches: int, times, cpu):
    """The printed record: medians, their ratios to bare forwards, and every round's seconds."""
    med = {k: statistics.median(v) for k, v in times.items()}
    mc = {k: statistics.median(v) for k, v in cpu.items()}
    return {
        "model": args.model,
        "tokens": shape,
        "n_edits": n_edits,
        "sweep_s": round(med["sweep"], 3),
        f"bare_{n_edits + 1}_forwards_s": round(med["bare"], 3),
        "sweep_vs_bare": round(med["sweep"] / med["bare"], 3),
        "sweep_skip0_s": round(med["sweep_skip0"], 3),
        "sweep_skip0_vs_bare": round(med["sweep_skip0"] / med["bare"], 3),
        "layer": args.layer,
        "layer_scales": n_scales,
        "layer_sweep_s": round(med["layer"], 3),
        f"bare_{n_scales + 1}_forwards_s": round(med["bare_k"], 3),
        "layer_sweep_vs_bare": round(med["layer"] / med["bare_k"], 3),
        "cpu_sweep_s": round(mc["sweep"], 3),
        f"cpu_bare_{n_edits + 1}_forwards_s": round(mc["bare"], 3),
        "cpu_sweep_vs_bare": round(mc["sweep"] / mc["bare"], 3),
        "cpu_sweep_skip0_vs_bare": round(mc["sweep_skip0"] / mc["bare"], 3),
        "cpu_layer_sweep_s": round(mc["layer"], 3),
        f"cpu_bare_{n_scales + 1}_forwards_s": round(mc["bare_k"], 3),
        "cpu_layer_sweep_vs_bare": round(mc["layer"] / mc["bare_k"], 3),
        "zeroshot_items": n_zs_items,
        "zeroshot_batches": n_zs_batches,
        "zeroshot_s": round(med["zeroshot"], 3),
        "bare_zs_s": round(med["bare_zs"], 3),
        "zeroshot_vs_bare": round(med["zeroshot"] / med["bare_zs"], 3),
        "cpu_zeroshot_vs_bare": round(mc["zeroshot"] / mc["bare_zs"], 3),
        "rounds_wall": {k: [round(x, 3) for x in v] for k, v in times.items()},
        "rounds_cpu": {k: [round(x, 3) for x in v] for k, v in cpu.items()},
    }


def main() -> None:
    args = _parse_args()
    torch.set_num_threads(args.threads)

    from tlgeo.models import load_model
    from tlgeo.decomposition.sweeps import SWEEP_SITES, layer_sweep, sensitivity_sweep
    from tlgeo.evals.zeroshot import evaluate_zeroshot

    model = load_model(args.model)
    ids, batch, n_text = _token_batch(model, args)
    sites = SWEEP_SITES
    n_edits = len(sites)
    scales = (0.0, 0.5, 1.5)  # layer sweep: K = 3 edited passes
    kw = dict(context=args.seq, max_tokens=n_text, batch_size=args.windows)

    def run_sweep():
        return sensitivity_sweep(model, ids, sites=sites, s_par_grid=(0.0,), s_perp_grid=(), **kw)

    def run_sweep0():  # no prefix reuse: every pass from the embeddings (hooks + loss overhead only)
        return sensitivity_sweep(model, ids, sites=sites, s_par_grid=(0.0,), s_perp_grid=(), skip_first=0, **kw)

    def run_bare(k):
        with torch.inference_mode():
            for _ in range(k):
                model(batch)

    def run_layer():
        return layer_sweep(model, ids, "value_excl_self", args.layer, scales, **kw)

    zs_tasks = ("piqa", "arc_easy", "winogrande")
    zs_batches = _zeroshot_batches(model, zs_tasks, args.zs_items)

    def run_bare_zs():
        with torch.inference_mode():
            for inp in zs_batches:
                model(inp)

    def run_zeroshot():
        return evaluate_zeroshot(model, zs_tasks, limit=args.zs_items)

    jobs = {
        "sweep": run_sweep,
        "bare": lambda: run_bare(n_edits + 1),
        "sweep_skip0": run_sweep0,
        "layer": run_layer,
        "bare_k": lambda: run_bare(len(scales) + 1),
        "zeroshot": run_zeroshot,
        "bare_zs": run_bare_zs,
    }
    run_bare(1)  # warm up
    times, cpu = _time_rounds(jobs, args.rounds)
    n_zs_items = args.zs_items * len(zs_tasks)
    out = _summary(args, list(batch.shape), n_edits, len(scales), n_zs_items, len(zs_batches), times, cpu)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
