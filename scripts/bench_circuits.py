"""Edge attribution time against one forward (goal: every edge's EAP score in <= 4 forward-equivalents).

On a task's prompts (default SmolLM2-135M, IOI, 8 prompts: the default ``--batch-size`` of ``tlgeo circuit``), in
rounds that alternate the order:

  forward     one forward of the clean prompts, no grad (the unit)
  eap         tlgeo's EAP of every edge: a corrupted forward, a clean forward and backward, the products
  eap_ig      EAP-IG with --ig-steps steps

and EAP's parts, each timed alone: the corrupted run, the clean forward and backward (the gradients at the
heads' q, k, v and the MLPs' inputs), the products (the senders' changes, the receivers' gradients through the
block norms, a run of blocks at a time, and their products; a slice of the prompts at a time where the code
slices them). Each is timed in wall seconds and in the process's CPU seconds (one thread: on a machine other jobs
share, CPU time is what the work itself costs, and the wall time what it took there); medians over ``--rounds``
(after one untimed call of each), and their ratios to the forward's, are printed as JSON lines. It times the
tlgeo it imports: ``PYTHONPATH=<another checkout> python scripts/bench_circuits.py`` times that one's code beside
this run's (its rows name its commit). With ``--out``, one row per method is appended
to ``OUT/eap_cost.csv`` with the commit that measured it (and the run's line to ``OUT/provenance.jsonl``).

    python scripts/bench_circuits.py [--model smollm2-135m] [--task ioi] [--prompts 8] [--rounds 3] [--threads 1]
        [--out DIR]
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
import time
from pathlib import Path

import torch


def _jobs(model, task, ig_steps: int) -> dict:
    """The timed calls, by name (the parts share the state of the last corrupted and clean runs)."""
    from tlgeo.circuits import eap as E
    from tlgeo.circuits.graph import graph_of

    metric = lambda logits, rows: task.subset(rows).score(logits)  # noqa: E731
    graph, rows, dt = graph_of(model), slice(0, task.n), torch.float32
    state: dict = {}

    def forward():
        with torch.no_grad():
            model(task.clean)

    # run_acts took the metric and computed the logits until 9c94bc4
    takes_metric = "metric" in inspect.signature(E.run_acts).parameters

    def corrupted():
        args = (metric, rows) if takes_metric else ()
        state["corr"] = E.run_acts(model, graph, task.corrupted, *args, dt)

    # the positions EAP multiplies (from the first token that differs) where the code takes them (after ba0675e)
    at = {"at": slice(E.first_change(task.clean, task.corrupted), None)}
    takes = inspect.signature(E._clean_with_grads).parameters
    if "at" not in takes:
        at = {}

    def clean_grad():  # with the corrupted run's W_O where the code shares it (as its EAP does)
        w_o = {"w_o": state["corr"].w_o} if "w_o" in takes else {}
        state["clean"], state["grads"] = E._clean_with_grads(model, graph, task.clean, metric, rows, dt, **at, **w_o)

    def products():
        cl, corr = state["clean"], state["corr"]
        if hasattr(E, "products"):  # after 9c94bc4: the code's own, a slice of the prompts at a time
            E.products(E.EdgeScores.zeros(graph), corr, cl, [(state["grads"], 1.0)], at["at"])
            return
        if hasattr(E, "changes"):  # 2e89d26 to 9c94bc4: the changes built from the runs' head outputs
            d, d_self = E.changes(corr, cl, *at.values())
            refs = cl.refs[:, :, at["at"]] if at else cl.refs
        else:  # before it (commit ba0675e and earlier): each run's writes
            d, d_self = corr.writes - cl.writes, corr.self_writes - cl.self_writes
            refs = torch.cat([cl.attn_in, cl.mlp_in, cl.final[None]])
        E.EdgeScores.zeros(graph).add(d, d_self, state["grads"], refs, 1.0)

    return {
        "forward": forward,
        "eap": lambda: E.eap_scores(model, task.clean, task.corrupted, metric, batch_size=task.n),
        "eap_ig": lambda: E.eap_scores(model, task.clean, task.corrupted, metric, ig_steps=ig_steps, batch_size=task.n),
        "corrupted_run": corrupted,
        "clean_forward_backward": clean_grad,
        "products": products,
    }


def _time(jobs: dict, rounds: int) -> dict[str, tuple[list[float], list[float]]]:
    """``name -> (wall seconds, CPU seconds)`` per round, the order alternating between rounds, after one untimed
    call of each (a model's first EAP also checks its norms' closed forms, its readout and its unembedding, once)."""
    for job in jobs.values():  # warm up
        job()
    times: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in jobs}
    for r in range(rounds):
        for name in list(jobs) if r % 2 == 0 else [*list(jobs)[1:], "forward"]:
            w, c = time.perf_counter(), time.process_time()
            jobs[name]()
            times[name][1].append(time.process_time() - c)
            times[name][0].append(time.perf_counter() - w)
    return times


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--task", default="ioi")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--ig-steps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=None, help="append the rows to OUT/eap_cost.csv (and provenance)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    from tlgeo.circuits.graph import graph_of
    from tlgeo.models import load_model
    from tlgeo.patching.tasks import build_task

    model = load_model(args.model)
    task = build_task(args.task, model, n=args.prompts)
    times = _time(_jobs(model, task, args.ig_steps), args.rounds)
    unit = {k: statistics.median(times["forward"][i]) for i, k in enumerate(("wall", "cpu"))}
    out, rows = {}, []
    for name, (wall, cpu) in times.items():
        w, c = statistics.median(wall), statistics.median(cpu)
        out[name] = {"seconds": w, "forwards": w / unit["wall"], "cpu_seconds": c, "cpu_forwards": c / unit["cpu"]}
        row = {
            "model": args.model,
            "task": args.task,
            "prompts": task.n,
            "tokens": task.clean.shape[1],
            "edges": graph_of(model).n_edges,
            "threads": args.threads,
            "rounds": args.rounds,
            "ig_steps": args.ig_steps,
            "method": name,
            **out[name],
        }
        rows.append(row)
        print(json.dumps(row))
    if args.out:
        from tlgeo.runner.provenance import record_table

        record_table(
            args.out,
            "eap_cost",
            rows,
            ["scripts/bench_circuits.py", *(sys.argv[1:] if argv is None else argv)],
            vars(args),
        )
    return out


if __name__ == "__main__":
    main()
