"""Patching engine time vs the same patches done the plain way (targets: exact <= 0.5x, attribution <= 3x).

Side by side in one run, on the same IOI prompts (default SmolLM2, 16 prompts, every
``--every``-th block):

  exact       tlgeo's exact sweep of the whole-head patch: one forward per block for all heads
              (rows = heads x prompts), resumed at the patched block, only the last position read out
  full        the same patches as TransformerLens's patching module makes them: one full forward
              per (block, head) from the embedding, full logits, the hook copying ``hook_z[:, :, head]``
  attribution attribution patching of every component (10) at every block: one forward and backward
  fwd_bwd     one forward and one backward of the metric (the floor attribution patching cannot beat)
  exact_all   the exact sweep of every component at the same blocks (attribution's alternative)

Rounds alternate the order; medians of wall time and of process CPU time are reported.

    python scripts/bench_patching.py [--model smollm2-135m] [--prompts 16] [--every 3] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def _parse_args() -> argparse.Namespace:
    """The command line: model, task, prompts, blocks, rounds and threads."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--task", default="ioi")
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--every", type=int, default=3, help="patch every k-th block (all methods the same blocks)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    return p.parse_args()


def _full_sweep(model, task, runs, layers: list[int]) -> list[torch.Tensor]:
    """TransformerLens's way: a full forward per (block, head) copying one head's z; each its metric ``[prompts]``."""
    out = []
    for layer in layers:
        name = f"blocks.{layer}.attn.hook_z"
        clean = runs.clean.acts[name]
        for head in range(model.cfg.n_heads):

            def patch(z, hook, _h=head, _c=clean):
                z = z.clone()
                z[:, :, _h] = _c[:, :, _h]
                return z

            with torch.no_grad():
                logits = model.run_with_hooks(task.corrupted, fwd_hooks=[(name, patch)])
            out.append(task.score(logits[:, -1]))
    return out


def _forward_backward(model, task) -> None:
    """One forward and one backward of the metric on the corrupted prompts, to the embeddings."""
    emb = {}

    def leaf(x, hook):
        emb["x"] = x.detach().requires_grad_(True)
        return emb["x"]

    with torch.enable_grad(), model.hooks(fwd_hooks=[("blocks.0.hook_resid_pre", leaf)]):
        m = task.score(model(task.corrupted)[:, -1]).sum()
    torch.autograd.grad(m, emb["x"])


def _time_rounds(fns: dict, rounds: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall and process CPU seconds per method and round, the order reversed every other round."""
    wall: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(rounds):
        order = list(fns) if r % 2 == 0 else list(reversed(fns))
        for k in order:
            t0, c0 = time.perf_counter(), time.process_time()
            fns[k]()
            wall[k].append(time.perf_counter() - t0)
            cpu[k].append(time.process_time() - c0)
    return wall, cpu


def _result(args: argparse.Namespace, task, n_blocks: int, n_heads: int, wall, cpu, err: float) -> dict:
    """The printed record: the settings, median seconds per method and the ratios the targets name."""
    med = {k: statistics.median(v) for k, v in wall.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    return {
        "model": args.model,
        "task": args.task,
        "prompts": task.n,
        "tokens_per_prompt": int(task.clean.shape[1]),
        "blocks": n_blocks,
        "heads": n_heads,
        "rounds": args.rounds,
        "threads": args.threads,
        "seconds": {k: round(v, 3) for k, v in med.items()},
        "cpu_seconds": {k: round(v, 3) for k, v in med_cpu.items()},
        "exact_over_full": round(med["exact"] / med["full"], 3),
        "attribution_over_fwd_bwd": round(med["attribution"] / med["fwd_bwd"], 3),
        "attribution_over_exact_all": round(med["attribution"] / med["exact_all"], 4),
        "max_abs_diff_exact_vs_full": err,
    }


def main() -> None:
    args = _parse_args()
    torch.set_num_threads(args.threads)

    from tlgeo.models import load_model
    from tlgeo.patching.attribution import attribution_sweep
    from tlgeo.patching.components import COMPONENTS
    from tlgeo.patching.exact import exact_sweep
    from tlgeo.patching.runs import task_runs
    from tlgeo.patching.tasks import build_task

    model = load_model(args.model)
    task = build_task(args.task, model, n=args.prompts)
    layers = list(range(0, model.cfg.n_layers, args.every))
    runs = task_runs(model, task, list(COMPONENTS), layers)

    def exact():
        return exact_sweep(model, runs, ["head"], layers=layers)

    def full():
        return _full_sweep(model, task, runs, layers)

    def attribution():
        return attribution_sweep(model, runs, list(COMPONENTS), layers=layers)

    def fwd_bwd():
        _forward_backward(model, task)

    def exact_all():
        return exact_sweep(model, runs, list(COMPONENTS), layers=layers)

    # the two exact methods patch the same thing: check before timing
    got = torch.tensor([r["patched"] for r in exact()])
    want = torch.stack(full())
    err = float((got - want).abs().max())
    assert err < 1e-3, f"exact sweep and full forwards disagree by {err}"

    fns = dict(exact=exact, full=full, attribution=attribution, fwd_bwd=fwd_bwd, exact_all=exact_all)
    wall, cpu = _time_rounds(fns, args.rounds)
    print(json.dumps(_result(args, task, len(layers), model.cfg.n_heads, wall, cpu, err), indent=1))


if __name__ == "__main__":
    main()
