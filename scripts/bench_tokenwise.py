"""Benchmark: the tokenwise layer maps at the paper's scale, against the issue's targets, in one run.

    .venv/bin/python scripts/bench_tokenwise.py [--model smollm2-135m --tokens 20000 --big-tokens 100000
                                                 --patch-tokens 128 --parts fits,backends,memory,patching]

* ``fits``: exact kNN (torch) and the four local classes (``diag_psd``, ``lowrank``,
  ``orthogonal``, ``linear``) for every token of a ``--tokens`` pool at every layer
  map; the total against 5 minutes.
* ``backends``: torch against faiss-cpu for the kNN of one layer (same neighbours?).
* ``memory``: the peak memory kNN adds, in a fresh process per run, for the
  ``--tokens`` and ``--big-tokens`` pools at one layer, against the ``N x N`` distance
  matrix it never builds.
* ``patching``: the KL of patching ``--patch-tokens`` tokens at every layer, resumed
  from the cached residual, against the same patched runs as full forwards, in
  alternating order; the ratio against 0.6.

The pools are collected once into ``--pool-dir`` (not part of the timings).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch


def _pool(model, tokens: int, seq_len: int, directory: Path):
    from tlgeo.data import load_text
    from tlgeo.evals.perplexity import corpus_batches
    from tlgeo.tokenwise import collect_pool

    windows = corpus_batches(model, load_text("wikitext2"), seq_len, tokens + 4 * seq_len)
    windows = windows[: -(-tokens // (seq_len - 1))]
    t = time.perf_counter()
    pool = collect_pool(model, windows, directory / f"pool-t{tokens}-s{seq_len}", batch_size=16, progress=True)
    print(
        f"pool: {pool.n_tokens} tokens x {pool.n_layers + 1} states of width {pool.d_model} "
        f"({time.perf_counter() - t:.0f} s to collect or open)"
    )
    return pool


def fits(pool, k: int, workers: int) -> None:
    from tlgeo.geometry.local_maps import LOCAL_MAPS, tokenwise_fits
    from tlgeo.geometry.neighbours import knn

    groups = torch.from_numpy(pool.window)
    kinds = list(LOCAL_MAPS)
    t_knn = t_fit = 0.0
    per_class = dict.fromkeys(kinds, 0.0)
    print(f"\nfits: {pool.n_tokens} tokens, k={k}, same-sequence neighbours excluded, {workers} fit worker(s)")
    for l in range(pool.n_layers):
        h_in, h_out = pool.pair(l)
        t = time.perf_counter()
        _, nb = knn(h_in, k, groups=groups, exclude_group=True)
        a = time.perf_counter() - t
        t = time.perf_counter()
        tokenwise_fits(kinds, h_in, h_out, nb, threads=workers, rank=8, ridge=1e-3)
        b = time.perf_counter() - t
        t_knn, t_fit = t_knn + a, t_fit + b
        print(f"  layer {l:2d}: kNN {a:5.1f} s, four classes {b:5.1f} s")
        if l == pool.n_layers // 2:  # one layer class by class, for the breakdown
            for kind in kinds:
                t = time.perf_counter()
                tokenwise_fits([kind], h_in, h_out, nb, threads=workers, rank=8, ridge=1e-3)
                per_class[kind] = time.perf_counter() - t
    total = t_knn + t_fit
    print(
        f"fits total: {total:.0f} s = kNN {t_knn:.0f} s + classes {t_fit:.0f} s over {pool.n_layers} layers "
        f"(target 300 s: {total / 300:.2f}x)"
    )
    print(
        f"  class by class at layer {pool.n_layers // 2}: " + ", ".join(f"{c} {s:.1f} s" for c, s in per_class.items())
    )


def backends(pool, k: int) -> None:
    from tlgeo.geometry.neighbours import knn

    layer = pool.n_layers // 2
    h, _ = pool.pair(layer)
    groups = torch.from_numpy(pool.window)
    out = {}
    for backend in ("torch", "faiss"):
        t = time.perf_counter()
        out[backend] = knn(h, k, groups=groups, exclude_group=True, backend=backend)[1]
        print(f"\nkNN backend {backend}: {time.perf_counter() - t:.1f} s at layer {layer} ({pool.n_tokens} tokens)")
    same = (out["torch"] == out["faiss"]).all(1).float().mean()
    print(f"tokens with identical neighbour lists: {same:.1%} (the rest differ by ties and float32 rounding)")


def memory_child(directory: str, layer: int, backend: str, chunk: int) -> None:
    from tlgeo.geometry.neighbours import knn
    from tlgeo.tokenwise import StatePool

    pool = StatePool.open(directory)
    h = torch.from_numpy(np.array(pool.states(layer), dtype=np.float32))
    groups = torch.from_numpy(pool.window)
    # the peak RSS of this process from here on (ru_maxrss would include the parent's at fork time)
    Path("/proc/self/clear_refs").write_text("5")
    before = _status_kib("VmRSS")
    t = time.perf_counter()
    knn(h, 32, groups=groups, exclude_group=True, chunk=chunk, backend=backend)
    peak = _status_kib("VmHWM")
    print(
        json.dumps(
            {
                "n": pool.n_tokens,
                "before_mib": before / 1024,
                "peak_mib": peak / 1024,
                "seconds": time.perf_counter() - t,
            }
        )
    )


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def memory(pools, chunk: int) -> None:
    print(f"\nkNN peak memory at one layer (fresh process each; chunk {chunk} queries):")
    for pool in pools:
        for backend in ("torch", "faiss"):
            r = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--memory-child",
                    str(pool.directory),
                    str(pool.n_layers // 2),
                    backend,
                    str(chunk),
                ],
                capture_output=True,
                text=True,
            )
            if r.returncode:
                print(f"  {backend} at {pool.n_tokens} tokens failed: {r.stderr.strip().splitlines()[-1]}")
                continue
            m = json.loads(r.stdout.strip().splitlines()[-1])
            n = m["n"]
            print(
                f"  {backend:5s} N={n:6d}: +{m['peak_mib'] - m['before_mib']:6.0f} MiB over the loaded states "
                f"({m['before_mib']:.0f} MiB) in {m['seconds']:.1f} s; one chunk of distances "
                f"{chunk * n * 4 / 2**20:.0f} MiB; N x N distances would be {n * n * 4 / 2**30:.1f} GiB"
            )


def patching(model, pool, patch_tokens: int, batch_size: int, rounds: int) -> None:
    from tlgeo.tokenwise import patch_kl

    rng = np.random.default_rng(0)
    idx = np.sort(rng.choice(pool.n_tokens, patch_tokens, replace=False))
    layers = list(range(pool.n_layers))
    reps = {l: torch.from_numpy(np.array(pool.states(l + 1)[idx], dtype=np.float32)) * 1.01 for l in layers}
    windows = pool.windows

    def resumed():
        patch_kl(model, pool, idx, reps, batch_size=batch_size)

    def full():  # the same patched runs, each a whole forward, and the same KLs (positions >= the patch)
        for s in range(0, len(idx), batch_size):
            j = idx[s : s + batch_size]
            toks, pos = windows[torch.as_tensor(pool.window[j])], torch.as_tensor(pool.position[j])
            b = torch.arange(len(j))
            sel = torch.arange(toks.shape[1])[None, :] >= pos[:, None]
            with torch.inference_mode():
                clean = torch.log_softmax(model(toks)[sel].float(), -1)
                for l in layers:
                    rep = reps[l][s : s + batch_size]

                    def patch(h, hook, rep=rep):
                        h = h.clone()
                        h[b, pos] = rep.to(h.dtype)
                        return h

                    out = torch.log_softmax(
                        model.run_with_hooks(toks, fwd_hooks=[(f"blocks.{l}.hook_resid_post", patch)])[sel].float(), -1
                    )
                    (clean.exp() * (clean - out)).sum(-1)

    print(
        f"\npatching {patch_tokens} tokens x {len(layers)} layers (windows of {windows.shape[1]}, batch {batch_size}):"
    )
    ratios = []
    for r in range(rounds):
        order = (resumed, full) if r % 2 == 0 else (full, resumed)
        times = {}
        for fn in order:
            t = time.perf_counter()
            fn()
            times[fn.__name__] = time.perf_counter() - t
        ratios.append(times["resumed"] / times["full"])
        print(
            f"  round {r}: resumed {times['resumed']:.1f} s, full forwards {times['full']:.1f} s, "
            f"ratio {ratios[-1]:.3f}"
        )
    print(f"patching ratio (median of {rounds}): {float(np.median(ratios)):.3f} (target <= 0.6)")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--memory-child":
        memory_child(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--tokens", type=int, default=20000)
    p.add_argument("--big-tokens", type=int, default=100000, help="the second pool for the memory part (0: skip)")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--k", type=int, default=32)
    p.add_argument("--workers", type=int, default=2, help="fit chunks side by side")
    p.add_argument("--chunk", type=int, default=1024, help="kNN queries per block")
    p.add_argument("--patch-tokens", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--parts", default="fits,backends,memory,patching")
    p.add_argument("--pool-dir", default="checkpoints/bench-tokenwise")
    a = p.parse_args()
    parts = set(a.parts.split(","))
    from tlgeo.models import load_model

    model = load_model(a.model)
    pool = _pool(model, a.tokens, a.seq_len, Path(a.pool_dir))
    if "fits" in parts:
        fits(pool, a.k, a.workers)
    if "backends" in parts:
        backends(pool, a.k)
    if "memory" in parts:
        pools = [pool] + ([_pool(model, a.big_tokens, a.seq_len, Path(a.pool_dir))] if a.big_tokens else [])
        memory(pools, a.chunk)
    if "patching" in parts:
        patching(model, pool, a.patch_tokens, a.batch_size, a.rounds)


if __name__ == "__main__":
    main()
