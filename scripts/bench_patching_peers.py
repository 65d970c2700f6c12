"""The same head sweep in tlgeo, TransformerLens's patching module, nnsight and pyvene: equal effects, and the time.

Every head's output z (the input of the attention's output projection), clean into corrupted (denoising), at
every ``--every``-th block, on ``--prompts`` IOI prompts of one sample; the metric is the task's (IOI:
logit(IO) - logit(S) at the last position) and the effect the share of the clean - corrupted gap a patch moves
(:func:`tlgeo.patching.effects.effect`). Side by side in one process and one thread setting:

  tlgeo_exact        tlgeo's exact sweep: one forward per block for all heads (rows = heads x prompts), resumed
                     at the patched block, only the last position read out
  tlgeo_attribution  tlgeo's attribution patching of the whole head at the same blocks (first order: one forward
                     and backward); its effects are an approximation and are compared, not required equal
  transformer_lens   ``transformer_lens.patching.get_act_patch_attn_head_out_by_pos``'s way: one full forward per
                     (block, head) with a hook copying ``hook_z[:, :, head]`` (on tlgeo's bridge)
  nnsight            ``NNsight`` over the plain Hugging Face model: one trace per (block, head) writing the clean
                     slice into ``o_proj``'s input
  pyvene             ``IntervenableModel`` with a ``VanillaIntervention`` on ``head_attention_value_output``
                     (unit ``h.pos``, every position), one call per (block, head)

The peers are optional: ``pip install nnsight pyvene`` (their own dependencies: nnsight greenlet,
websocket-client and zstandard; pyvene protobuf). A peer that is not installed is reported and skipped.
Medians over ``--rounds`` (the order alternates); the effects of every method against tlgeo's exact sweep
(max |difference|, target 1e-3).

    python scripts/bench_patching_peers.py [--model smollm2-135m] [--prompts 16] [--every 3] [--rounds 2] [--out DIR]

With ``--out``, each method's row (median seconds, its ratio to tlgeo's exact sweep, the largest effect difference)
is appended to ``DIR/peers.csv`` with the commit that measured it and the settings, and the run's line to
``DIR/provenance.jsonl``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

warnings.filterwarnings("ignore")


def hf_model(model):
    """A plain Hugging Face model with the bridge's weights (the peers wrap HF models, not tlgeo's bridge)."""
    from transformers import AutoModelForCausalLM

    cfg = model.original_model.config
    hf = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    names = {n.replace("._original_component", ""): p for n, p in model.original_model.named_parameters()}
    missing, _ = hf.load_state_dict({n: p.detach() for n, p in names.items()}, strict=False)
    missing = [m for m in missing if m != "lm_head.weight"]
    if missing:
        raise RuntimeError(f"the plain model lacks {missing[:3]}")
    hf.tie_weights()
    hf.config._attn_implementation = "eager"
    return hf.eval()


def sweep_tl(model, runs, layers):
    """TransformerLens's patching-module way: a full forward per (block, head), the hook copying one head's z."""
    out = {}
    for layer in layers:
        name = f"blocks.{layer}.attn.hook_z"
        clean = runs.clean.acts[name]
        for head in range(model.cfg.n_heads):

            def patch(z, hook, _h=head):
                z[:, :, _h] = clean[:, :, _h].to(z.dtype)
                return z

            with torch.no_grad():
                logits = model.run_with_hooks(runs.corrupted.tokens, fwd_hooks=[(name, patch)])
            out[(layer, head)] = runs.task.score(logits[:, -1]).float().numpy()
    return out


def sweep_nnsight(hf, runs, layers, n_heads, d_head):
    from nnsight import NNsight

    nm = NNsight(hf)
    clean_tok, corr_tok = runs.clean.tokens, runs.corrupted.tokens
    with torch.no_grad():
        saved = []
        with nm.trace(clean_tok):
            for layer in layers:
                saved.append(nm.model.layers[layer].self_attn.o_proj.input.save())
        clean = dict(zip(layers, [torch.as_tensor(s).detach().clone() for s in saved]))
        out = {}
        for layer in layers:
            for head in range(n_heads):
                sl = slice(head * d_head, (head + 1) * d_head)
                with nm.trace(corr_tok):
                    x = nm.model.layers[layer].self_attn.o_proj.input
                    x[:, :, sl] = clean[layer][:, :, sl]
                    logits = nm.output.logits[:, -1].save()
                out[(layer, head)] = runs.task.score(torch.as_tensor(logits)).float().numpy()
    return out


def sweep_pyvene(hf, runs, layers, n_heads):
    import pyvene as pv

    b, pos = runs.clean.tokens.shape
    every = list(range(pos))
    out = {}
    with torch.no_grad():
        for layer in layers:
            cfg = pv.IntervenableConfig(
                [
                    {
                        "layer": layer,
                        "component": "head_attention_value_output",
                        "unit": "h.pos",
                        "max_number_of_units": 1,
                    }
                ],
                intervention_types=pv.VanillaIntervention,
            )
            im = pv.IntervenableModel(cfg, model=hf)
            im.disable_model_gradients()
            for head in range(n_heads):
                loc = [[[head]] * b, [every] * b]
                _, got = im(
                    {"input_ids": runs.corrupted.tokens},
                    [{"input_ids": runs.clean.tokens}],
                    unit_locations={"sources->base": ([loc], [loc])},
                )
                out[(layer, head)] = runs.task.score(got.logits[:, -1]).float().numpy()
    return out


def package_version(method: str) -> str:
    """``name==version`` of the package whose code a method runs (tlgeo's sweeps: tlgeo)."""
    from importlib.metadata import PackageNotFoundError, version

    name = {"transformer_lens": "transformer-lens"}.get(
        method, method.split("_")[0] if method.startswith("tlgeo") else method
    )
    try:
        return f"{name}=={version(name)}"
    except PackageNotFoundError:
        return name


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line: model, task, prompts, blocks, rounds, threads and ``--out``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--task", default="ioi", help="a built-in patching task (induction on a byte-tokenizer model)")
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--every", type=int, default=3, help="patch every k-th block (every method the same blocks)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=None, help="append the rows to OUT/peers.csv (and provenance)")
    return p.parse_args(argv)


def _methods(model, hf, runs, layers: list[int]) -> dict:
    """Each method's sweep as a call returning ``{(layer, head): patched metric [prompts]}``; absent peers dropped."""
    from tlgeo.patching.attribution import attribution_sweep
    from tlgeo.patching.exact import exact_sweep

    n_heads, d_head = model.cfg.n_heads, model.cfg.d_head
    methods = {
        "tlgeo_exact": lambda: {
            (r["layer"], r["head"]): np.asarray(r["patched"]) for r in exact_sweep(model, runs, ["head"], layers=layers)
        },
        "tlgeo_attribution": lambda: {
            (r["layer"], r["head"]): np.asarray(r["patched"])
            for r in attribution_sweep(model, runs, ["head"], layers=layers)
        },
        "transformer_lens": lambda: sweep_tl(model, runs, layers),
        "nnsight": lambda: sweep_nnsight(hf, runs, layers, n_heads, d_head),
        "pyvene": lambda: sweep_pyvene(hf, runs, layers, n_heads),
    }
    for peer in ("nnsight", "pyvene"):
        try:
            __import__(peer)
        except ImportError as e:
            print(f"{peer}: not installed ({e}); skipped")
            methods.pop(peer)
    return methods


def _time_methods(methods: dict, runs, rounds: int) -> tuple[dict[str, list[float]], dict[str, dict]]:
    """Seconds per method and round (the order alternating) and each method's effects of its last round."""
    from tlgeo.patching.effects import effect

    clean, corrupted = runs.clean.metric.numpy(), runs.corrupted.metric.numpy()
    times: dict[str, list[float]] = {m: [] for m in methods}
    effects: dict[str, dict] = {}
    for r in range(rounds):
        for name in list(methods) if r % 2 == 0 else list(methods)[::-1]:
            t0 = time.perf_counter()
            got = methods[name]()
            times[name].append(time.perf_counter() - t0)
            effects[name] = {k: effect(v, clean, corrupted, "denoise") for k, v in got.items()}
    return times, effects


def _method_rows(methods: dict, times: dict[str, list[float]], effects: dict[str, dict]) -> list[dict]:
    """One row per method: its median seconds and its largest effect difference from tlgeo's exact sweep."""
    ref = effects["tlgeo_exact"]
    rows = []
    for name in methods:
        diff = max(abs(effects[name][k] - ref[k]) for k in ref)
        rows.append({"method": name, "median_s": statistics.median(times[name]), "max_abs_effect_diff": diff})
    return rows


def _print_rows(args: argparse.Namespace, rows: list[dict], n_blocks: int, n_heads: int) -> None:
    """Print the methods' table and tlgeo's exact sweep and attribution against the fastest peer."""
    base = {r["method"]: r["median_s"] for r in rows}
    exact_peers = [m for m in base if m not in ("tlgeo_exact", "tlgeo_attribution")]
    print(
        f"{args.model}, {args.task}, {args.prompts} prompts, {n_blocks} blocks x {n_heads} heads, "
        f"{args.threads} threads, "
        f"median of {args.rounds} rounds"
    )
    print(f"{'method':<18} {'median s':>9} {'x tlgeo exact':>14} {'max |effect - tlgeo exact|':>27}")
    for r in rows:
        print(
            f"{r['method']:<18} {r['median_s']:>9.2f} {r['median_s'] / base['tlgeo_exact']:>14.2f} "
            f"{r['max_abs_effect_diff']:>27.2e}"
        )
    if exact_peers:
        fastest = min(exact_peers, key=base.get)
        print(
            f"tlgeo exact vs the fastest peer ({fastest}): {base['tlgeo_exact'] / base[fastest]:.2f}x its time; "
            f"attribution vs the fastest exact sweep: "
            f"{min(base[m] for m in ['tlgeo_exact', *exact_peers]) / base['tlgeo_attribution']:.1f}x faster"
        )


def _record_rows(args: argparse.Namespace, argv: list[str] | None, rows: list[dict], n_blocks: int, n_heads: int):
    """Append the rows, with the settings and each method's package, to ``args.out/peers.csv`` and provenance."""
    from tlgeo.runner.provenance import record_table

    base = {r["method"]: r["median_s"] for r in rows}
    settings = {
        "model": args.model,
        "task": args.task,
        "prompts": args.prompts,
        "blocks": n_blocks,
        "heads": n_heads,
        "threads": args.threads,
        "rounds": args.rounds,
    }
    record_table(
        args.out,
        "peers",
        [
            {
                **settings,
                **r,
                "x_tlgeo_exact": r["median_s"] / base["tlgeo_exact"],
                "package": package_version(r["method"]),
            }
            for r in rows
        ],
        ["scripts/bench_patching_peers.py", *(sys.argv[1:] if argv is None else argv)],
        vars(args),
    )


def main(argv: list[str] | None = None) -> None:
    args = _parse_args(argv)
    torch.set_num_threads(args.threads)

    from tlgeo.models import load_model
    from tlgeo.patching.runs import task_runs
    from tlgeo.patching.tasks import build_task

    model = load_model(args.model)
    task = build_task(args.task, model, n=args.prompts)
    layers = list(range(0, model.cfg.n_layers, args.every))
    runs = task_runs(model, task, ["head"], layers)
    hf = hf_model(model)
    methods = _methods(model, hf, runs, layers)
    times, effects = _time_methods(methods, runs, args.rounds)
    rows = _method_rows(methods, times, effects)
    _print_rows(args, rows, len(layers), model.cfg.n_heads)
    if args.out:
        _record_rows(args, argv, rows, len(layers), model.cfg.n_heads)


if __name__ == "__main__":
    main()
