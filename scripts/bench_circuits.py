"""Edge attribution time against one forward (goal: every edge's EAP score in <= 4 forward-equivalents).

On a task's prompts (default SmolLM2-135M, IOI, 4 prompts), in rounds that alternate the order:

  forward     one forward of the clean prompts, no grad (the unit)
  eap         tlgeo's EAP of every edge: a corrupted forward, a clean forward and backward, the products
  eap_ig      EAP-IG with --ig-steps steps

and EAP's parts, each timed alone: the corrupted run with its senders' writes, the clean forward and backward
with the norms' vector-Jacobian products, the products of the senders' changes with the receivers' gradients.
Medians of wall time, and their ratios to the forward's, are printed as JSON lines.

    python scripts/bench_circuits.py [--model smollm2-135m] [--task ioi] [--prompts 4] [--rounds 2] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--task", default="ioi")
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--ig-steps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    from tlgeo.circuits import eap as E
    from tlgeo.circuits.graph import graph_of
    from tlgeo.models import load_model
    from tlgeo.patching.tasks import build_task

    model = load_model(args.model)
    task = build_task(args.task, model, n=args.prompts)
    metric = lambda logits, rows: task.subset(rows).score(logits)  # noqa: E731
    graph, rows, dt = graph_of(model), slice(0, task.n), torch.float32

    def forward():
        with torch.no_grad():
            model(task.clean)

    state: dict = {}

    def corrupted():
        state["corr"] = E.run_acts(model, graph, task.corrupted, metric, rows, dt)

    def clean_grad():
        state["clean"], state["grads"] = E._clean_with_grads(model, graph, task.clean, metric, rows, dt)

    def products():
        cl, corr = state["clean"], state["corr"]
        out = E.EdgeScores.zeros(graph)
        out.add(
            corr.writes - cl.writes,
            corr.self_writes - cl.self_writes,
            state["grads"],
            torch.cat([cl.attn_in, cl.mlp_in, cl.final[None]]),
            1.0,
        )

    jobs = {
        "forward": forward,
        "eap": lambda: E.eap_scores(model, task.clean, task.corrupted, metric, batch_size=task.n),
        "eap_ig": lambda: E.eap_scores(
            model, task.clean, task.corrupted, metric, ig_steps=args.ig_steps, batch_size=task.n
        ),
        "corrupted_run": corrupted,
        "clean_forward_backward": clean_grad,
        "products": products,
    }
    forward()  # warm up
    times: dict[str, list[float]] = {k: [] for k in jobs}
    for r in range(args.rounds):
        for name in list(jobs) if r % 2 == 0 else [*list(jobs)[1:], "forward"]:
            t = time.perf_counter()
            jobs[name]()
            times[name].append(time.perf_counter() - t)
    unit = statistics.median(times["forward"])
    out = {}
    for name, ts in times.items():
        out[name] = {"seconds": statistics.median(ts), "forwards": statistics.median(ts) / unit}
        print(
            json.dumps(
                {
                    "model": args.model,
                    "task": args.task,
                    "prompts": task.n,
                    "tokens": task.clean.shape[1],
                    "edges": graph.n_edges,
                    "method": name,
                    **out[name],
                }
            )
        )
    return out


if __name__ == "__main__":
    main()
