"""Benchmark: PDSF geometry from batched forwards, and persistent rotations against unedited generation.

    .venv/bin/python scripts/bench_pdsf.py [--model smollm2-135m --per-group 8 --new-tokens 64 --rounds 1]

* ``geometry``: the 224 SpecA prompts' last-token states at every layer, one forward per
  batch with a ``names_filter`` of the ``L + 1`` residual hooks (counted), then the geometry
  tables; times of both.
* ``generation``: for each condition (D, S, F_top, random), the persistent rotation over the
  SpecB prompts (``--per-group`` of each of the 12 groups) for ``--new-tokens`` tokens with
  the KV cache, against the same unedited batched generation, in alternating order; the
  ratio of the totals against 1.3.
"""

from __future__ import annotations

import argparse
import time

import torch

from tlgeo.models import load_model
from tlgeo.pdsf import CONDITIONS, condition_bases, greedy_continuations, load_prompt_set, pdsf_states, run_geometry
from tlgeo.pdsf.interventions import default_layer, rotation_edit


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--per-group", type=int, default=8, help="SpecB prompts per group (8: all 96)")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--rounds", type=int, default=1)
    a = p.parse_args()
    model = load_model(a.model)

    forwards = []
    orig = model.run_with_cache

    def counted(*args, **kw):
        forwards.append(kw.get("names_filter"))
        return orig(*args, **kw)

    model.run_with_cache = counted
    t = time.perf_counter()
    st = pdsf_states(model, load_prompt_set("specA"), batch_size=a.batch_size)
    t_states = time.perf_counter() - t
    model.run_with_cache = orig
    names = [f"blocks.{l}.hook_resid_post" for l in range(model.cfg.n_layers)] + [
        "blocks.0.hook_resid_pre",
        "blocks.0.hook_attn_out",
    ]
    kept = [n for n in names if forwards[0](n)]
    t = time.perf_counter()
    g = run_geometry(model, st)
    t_geo = time.perf_counter() - t
    print(
        f"geometry: {len(st.prompts)} SpecA prompts, {len(forwards)} forwards of up to {a.batch_size} prompts, "
        f"each caching {len(kept)} of the residual hooks probed ({model.cfg.n_layers + 1} wanted; "
        f"blocks.0.hook_attn_out cached: {'blocks.0.hook_attn_out' in kept}); states {t_states:.1f} s, "
        f"geometry of {len(g.layers)} layers {t_geo:.1f} s"
    )

    gen = load_prompt_set("specB").take(a.per_group)
    gst = pdsf_states(model, gen, batch_size=a.batch_size)
    layer = default_layer(model.cfg.n_layers)
    cb = condition_bases(gst.states.states[layer], gst.u, CONDITIONS)
    print(
        f"\ngeneration: {len(gen)} SpecB prompts x {a.new_tokens} tokens, batch {a.batch_size}, KV cache, "
        f"edit at state {layer}"
    )
    totals = {"edited": 0.0, "unedited": 0.0}
    for r in range(a.rounds):
        for c in CONDITIONS:
            fn = rotation_edit(cb, c, layer, 42, "haar")
            runs = [("edited", fn), ("unedited", None)]
            for name, e in runs if (r + CONDITIONS.index(c)) % 2 == 0 else runs[::-1]:
                t = time.perf_counter()
                greedy_continuations(model, gst.tokens, a.new_tokens, batch_size=a.batch_size, edit=e)
                dt = time.perf_counter() - t
                totals[name] += dt
                print(f"  round {r} {c:>6} {name:>8}: {dt:.1f} s")
    ratio = totals["edited"] / totals["unedited"]
    print(
        f"persistent rotations {totals['edited']:.0f} s vs unedited generation {totals['unedited']:.0f} s: "
        f"ratio {ratio:.3f} (target <= 1.3)"
    )


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    main()
