"""``tlgeo circuit``: its flags are :class:`~tlgeo.circuits.config.CircuitConfig`'s fields; it prints the summary,
the top edges with their parts and the faithfulness curve, and saves the circuit figure and the curve."""

from __future__ import annotations

import argparse
import math

from ..runner.analysis import Command
from ..runner.cliargs import LoadConfig, add_config_args, add_out_arg, print_written
from .config import CircuitConfig

__all__ = ["COMMANDS"]

DESCRIPTION = (
    "Score every edge of the model's graph (the input, every head's query, key and value inputs, every MLP, "
    "the logits) on a task's clean and corrupted prompts by edge attribution patching (EAP), EAP with "
    "integrated gradients, or exact edge patching; split each score by the sender's write along / across "
    "the receiver's residual and, for heads, into the self message and the non-self aggregate; keep the "
    "top-k edges with every other edge reading the corrupted run and report the share of the metric gap "
    "they recover (the faithfulness curve, its area, the smallest k reaching each level); check the top "
    "edges against exact edge patching. Resumes from its log."
)


def add_args(p: argparse.ArgumentParser) -> None:
    LoadConfig.add_args(p)
    add_config_args(p, CircuitConfig)
    add_out_arg(p, "runs/circuit-<model>")


def run_command(args: argparse.Namespace) -> int:
    from ..runner.cliargs import model_key
    from ..runner.distributed import run_command as run
    from .analysis import ANALYSIS, CircuitResult
    import matplotlib.pyplot as plt

    res, cfg, out = run(ANALYSIS, args, out_name="circuit-" + model_key(args.model))
    if res is None:  # a torchrun rank other than 0: rank 0 writes
        return 0
    files = [out / CircuitResult.table(n).filename for n in res.tables()]
    for _, s in res.summary.iterrows():
        files += _show_task(res, s, cfg, out)
        plt.close("all")
    print_written(files + [out / "circuits.jsonl"])
    return 0


def _show_task(res, s, cfg: CircuitConfig, out) -> list:
    """Print one task's summary, top edges and curve; save its two figures (their paths)."""
    from .plots import circuit_figure, faithfulness_figure

    mine = lambda df: df[(df["task"] == s["task"]) & (df["method"] == s["method"])]  # noqa: E731
    edges, curve = mine(res.edges), mine(res.faithfulness)
    print(
        f"\n{s['task']}, {s['method']}: {s['edges']} edges; metric clean {s['clean_metric']:.3f}, corrupted "
        f"{s['corrupted_metric']:.3f}; scores in {s['score_seconds']:.2f} s = {s['forward_equivalents']:.1f} "
        f"forwards of the prompts; score matrices {s['score_bytes'] / 2**20:.1f} MiB"
    )
    levels = [c for c in res.summary.columns if c.startswith("k") and c[1:].isdigit()]
    reach = ", ".join(f"{c[1:]} %: {s[c]:.0f}" for c in levels)
    print(f"smallest k reaching {reach}; curve area {s['area']:.3f}")
    if s["verified"]:
        print(
            f"top {s['verified']} edges vs exact edge patching: Spearman {s['spearman']:.2f} (sizes), signs agree "
            f"{s['sign_agreement']:.2f}"
        )
    show = ["sender", "receiver", "score", "score_par", "score_perp", "score_self", "score_nonself"]
    print(
        "top edges (score: metric change when the edge alone reads the corrupted sender; par / perp: the sender's "
        "change along / across the receiver's residual; self / nonself: a head's self message / the rest):"
    )
    print(edges.nsmallest(15, "rank")[show].to_string(index=False, float_format="{:.4g}".format))
    print("faithfulness (share of the clean - corrupted gap recovered with only the top k edges):")
    print(curve[["k", "share", "metric", "recovered"]].to_string(index=False, float_format="{:.3f}".format))
    k = s[levels[0]] if levels and not math.isnan(s[levels[0]]) else min(20, s["edges"])
    files = []
    for name, fig in (
        (
            f"circuit_graph_{s['task']}.png",
            circuit_figure(edges, int(k), title=f"{s['task']}: the {int(k)} top edges ({s['method']})"),
        ),
        (
            f"circuit_faithfulness_{s['task']}.png",
            faithfulness_figure(curve, cfg.levels, label=f"{s['task']}, {s['method']}"),
        ),
    ):
        fig.savefig(out / name, dpi=110)
        files.append(out / name)
    return files


COMMANDS = (
    Command(
        "circuit",
        "circuit discovery: every edge scored (EAP, EAP-IG or exact), split by the geometry "
        "of the sender's write; faithfulness curves",
        add_args,
        run_command,
        DESCRIPTION,
    ),
)
