#!/usr/bin/env python
"""Overhead of parallel suppression (the paper's Table 7 analogue).

1. Training step (forward + backward + AdamW) of a tiny GPT trained through the bridge,
   with vs without value-space suppression (and residual attention), interleaved rounds;
   the ratio is the median of per-round ratios.
2. Prefill and greedy decode (KV cache) of SmolLM2-135M edited (value full aggregate,
   ``s_par = 0``, every layer) vs unedited.

    nice -n 10 python scripts/bench_train_overhead.py [--device cuda --dtype bf16] [--out runs/pretrain-study/overhead.csv]

On GPU use ``--dtype bf16`` (autocast for training, bf16 weights for SmolLM2).
"""  # noqa: E501

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")

import pandas as pd  # noqa: E402
import torch  # noqa: E402


def _sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def bench_train(a) -> list[dict]:
    from tlgeo.train import ModelSpec, TrainConfig, make_model

    rows = []
    models = {}
    for v in a.variants.split(","):
        cfg = TrainConfig(
            model=ModelSpec(arch="gpt", d_model=a.d_model, n_layers=a.layers, n_heads=a.heads, context=a.seq_len),
            variant=v,
            seed=0,
        )
        lm = make_model(cfg).to(a.device)
        opt = torch.optim.AdamW(lm.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
        models[v] = (lm, opt)
    toks = torch.randint(0, 256, (a.batch, a.seq_len + 1), generator=torch.Generator().manual_seed(0)).to(a.device)
    ac = torch.autocast("cuda", dtype=torch.bfloat16) if a.dtype == "bf16" else torch.autocast("cpu", enabled=False)

    def step(v):
        lm, opt = models[v]
        _sync(a.device)
        t = time.perf_counter()
        for _ in range(a.inner):
            with ac:
                loss = lm(toks)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(lm.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
        _sync(a.device)
        return (time.perf_counter() - t) / a.inner

    for v in models:  # warm-up
        step(v)
    times = {v: [] for v in models}
    for _ in range(a.rounds):
        for v in models:
            times[v].append(step(v))
    base = times["none"]
    for v, ts in times.items():
        rows.append(
            {
                "bench": "train_step",
                "mode": v,
                "median_s": statistics.median(ts),
                "ratio_vs_unedited": statistics.median([t / b for t, b in zip(ts, base)]),
                "shape": f"{a.batch}x{a.seq_len}, gpt d{a.d_model} L{a.layers}",
            }
        )
    return rows


def bench_infer(a) -> list[dict]:
    from tlgeo import Edit, load_model

    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    model = load_model(a.model, device=a.device, dtype=dtype)
    hooks = {"unedited": [], "value_full s_par=0": Edit("value_full", s_par=0.0).hooks(model)}
    prompt = torch.randint(0, 5000, (1, a.prefill), generator=torch.Generator().manual_seed(0)).to(a.device)

    @torch.no_grad()
    def prefill(h):
        _sync(a.device)
        t = time.perf_counter()
        with model.hooks(fwd_hooks=h):
            model(prompt)
        _sync(a.device)
        return time.perf_counter() - t

    rows = []
    for name, fn, n in (("prefill", prefill, a.prefill), ("decode_token", decode_gen(model, prompt, a), a.decode)):
        times = {m: [] for m in hooks}
        for m in hooks:
            fn(hooks[m])
        for _ in range(a.rounds):
            for m, h in hooks.items():
                times[m].append(fn(h))
        for m, ts in times.items():
            rows.append(
                {
                    "bench": name,
                    "mode": m,
                    "median_s": statistics.median(ts),
                    "ratio_vs_unedited": statistics.median([t / b for t, b in zip(ts, times["unedited"])]),
                    "shape": f"{a.model} {a.dtype}, {'prompt ' + str(a.prefill) if name == 'prefill' else str(a.decode) + ' new tokens after a 64-token prompt'}",  # noqa: E501
                }
            )
    return rows


def decode_gen(model, prompt, a):
    """Greedy decode with the bridge's generate (KV cache); returns seconds per new token."""

    @torch.no_grad()
    def run(h):
        _sync(a.device)
        t = time.perf_counter()
        with model.hooks(fwd_hooks=h):
            model.generate(
                prompt[:, :64], max_new_tokens=a.decode, do_sample=False, verbose=False, use_past_kv_cache=True
            )
        _sync(a.device)
        return (time.perf_counter() - t) / a.decode

    return run


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--variants", default="none,value_full,attn")
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--inner", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--prefill", type=int, default=256)
    p.add_argument("--decode", type=int, default=16)
    p.add_argument("--skip-infer", action="store_true")
    p.add_argument("--out", default=None, help="CSV path")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    rows = bench_train(a)
    if not a.skip_infer:
        rows += bench_infer(a)
    df = pd.DataFrame(rows)
    df.insert(0, "device", f"{a.device} ({a.threads} threads)" if a.device == "cpu" else a.device)
    print(df.to_string(index=False, float_format=lambda x: f"{x:.4f}"))
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        df.to_csv(a.out, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
