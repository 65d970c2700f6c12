"""tlgeo's EAP edge scores beside auto-circuit's: equal scores where the definitions match, and the time of each.

Both score every edge of the same graph (Syed et al.'s EAP: ``(corrupted - clean write of the sender) . dM / dx``
at the receiver's input, summed over positions, one clean forward + backward) on the same weights, prompts and
metric (the task's: IOI's logit difference, the induction task's log-probability of the answer), one thread
(scripts/bench_circuits.py times tlgeo's EAP and its stages alone):

  tlgeo         :func:`tlgeo.circuits.eap.eap_scores` on tlgeo's bridge
  auto_circuit  ``mask_gradient_prune_scores(grad_function=..., answer_function=..., mask_val=0.0)`` (the fast EAP
                its docs call equal to its per-edge ``edge_attribution_patching_prune_scores``) on a
                ``HookedTransformer`` of TransformerLens 2 (``use_attn_result``, ``use_split_qkv_input``,
                ``use_hook_mlp_in``; ``ungroup_grouped_query_attention`` under GQA), ``factorized=True``,
                ``separate_qkv=True``, ``slice_output="last_seq"``, every position patched, the weights frozen

auto-circuit 1.0.1 imports ``HookedTransformer``, which TransformerLens 4 (tlgeo's) no longer has, so it runs in its
own environment (``--peer-python``, default ``/work/venv-autocircuit/bin/python``; built with ``pip install
torch==2.13.0 auto-circuit==1.0.1 transformer-lens==2.16.1 "transformers<4.58" "pyarrow<20"``): this script, run
there with ``--peer-side DIR``, reads the Hugging Face weights, prompts and answers that tlgeo's side wrote to
``DIR`` (safetensors + JSON), builds the ``HookedTransformer`` from them and writes its scores, its clean metric
(a check that both sides run the same model) and its timings back as JSON. A missing environment is reported and
the tlgeo side still runs.

The edges compared (:func:`peer_edge_map`): tlgeo's senders (``input``, ``LlHh``, ``LlMLP``) are auto-circuit's
source nodes (``Resid Start``, ``Al.h``, ``MLP l``) and its receivers (``LlHh.q``, ``LlHg.k`` / ``.v``, ``LlMLP``,
``logits``) its destination nodes (``Al.h.Q``, ``Al.h.K`` / ``.V``, ``MLP l``, ``Resid End``, the last block's
``hook_resid_post``, which is the final norm's input). Under grouped-query attention auto-circuit has a key and
a value receiver per *query* head (ungrouped copies of the kv head's input); tlgeo's per *kv* head is their sum
(the shared input's gradient is the sum of its copies'). auto-circuit's score is ``d loss / d mask`` with ``loss
= -mean metric`` and the mask moving the receiver's input by ``mask x (corrupted - clean)``: tlgeo's score is
its negative. Every tlgeo edge has its auto-circuit counterpart and the reverse (the same edge sets), so all edges
are compared. The difference is ``max |tlgeo - peer| / max |tlgeo|`` over all edges (goal <= 1e-4).

    python scripts/bench_circuits_peers.py [--cases zoo,ioi] [--prompts 8] [--rounds 3] [--out DIR]

Timings: medians over ``--rounds`` (alternating order); tlgeo's also in forward-equivalents (one plain no-grad
forward of the same clean batch on tlgeo's bridge, timed in the same run). auto-circuit's ``patchable_model``
(building its graph and wrappers, once per model) is timed apart and not in its EAP time. With ``--out``, one row per
case and method is appended to ``DIR/circuits_peers.csv`` with the commit that measured it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

warnings.filterwarnings("ignore")

PEER_PYTHON = os.environ.get("AUTOCIRCUIT_PYTHON", "/work/venv-autocircuit/bin/python")
CASES = {"zoo": ("zoo/induction-llama", "induction"), "ioi": ("smollm2-135m", "ioi")}
# the task's metric -> auto-circuit's (grad_function, answer_function)
PEER_METRIC = {
    "logit_diff": ("logit", "avg_diff"),
    "logprob": ("logprob", "avg_val"),
    "prob_diff": ("prob", "avg_diff"),
}


# --------------------------------------------------------------------------------------------- the edge mapping
def peer_sender(graph, s: int) -> str:
    """auto-circuit's source node name of tlgeo sender index ``s`` (``Resid Start``, ``A3.2``, ``MLP 3``)."""
    if s == 0:
        return "Resid Start"
    layer, pos = divmod(s - 1, graph.n_heads + 1)
    return f"MLP {layer}" if pos == graph.n_heads else f"A{layer}.{pos}"


def peer_receivers(graph, r: int) -> list[str]:
    """auto-circuit's destination node names whose scores add up to tlgeo receiver ``r``: one, except a kv head's
    key or value under grouped-query attention (its query heads' ungrouped copies)."""
    if r == graph.logits_receiver:
        return ["Resid End"]
    layer, pos = divmod(r, graph.per_block)
    if pos == graph.per_block - 1:
        return [f"MLP {layer}"]
    if pos < graph.n_heads:
        return [f"A{layer}.{pos}.Q"]
    inp, g = divmod(pos - graph.n_heads, graph.n_kv)
    group = graph.n_heads // graph.n_kv
    return [f"A{layer}.{h}.{'KV'[inp]}" for h in range(g * group, (g + 1) * group)]


def peer_edge_map(graph) -> dict[tuple[int, int], list[tuple[str, str]]]:
    """tlgeo edge ``(sender, receiver)`` -> the auto-circuit edges ``(src name, dest name)`` whose scores add up to
    it, for every edge of ``graph``."""
    out = {}
    for s, r in torch.nonzero(graph.valid).tolist():
        src = peer_sender(graph, s)
        out[(s, r)] = [(src, d) for d in peer_receivers(graph, r)]
    return out


def peer_edges(graph) -> set[tuple[str, str]]:
    """The edges auto-circuit's factorized graph has (its rule, restated: a source of an earlier node layer than
    the destination; heads of block l sit at layer 2l+1, its MLP at 2l+2, or 2l+1 in a parallel block)."""
    L, H = graph.n_layers, graph.n_heads
    mlp = (lambda l: 2 * l + 1) if graph.parallel else (lambda l: 2 * l + 2)
    srcs = {"Resid Start": 0} | {f"A{l}.{h}": 2 * l + 1 for l in range(L) for h in range(H)}
    srcs |= {f"MLP {l}": mlp(l) for l in range(L)}
    dests = {f"A{l}.{h}.{x}": 2 * l + 1 for l in range(L) for h in range(H) for x in "QKV"}
    dests |= {f"MLP {l}": mlp(l) for l in range(L)} | {"Resid End": max(mlp(L - 1), 2 * L - 1) + 1}
    return {(s, d) for s, ls in srcs.items() for d, ld in dests.items() if ls < ld}


def to_tlgeo(graph, peer: dict[tuple[str, str], float]) -> torch.Tensor:
    """auto-circuit's scores ``{(src, dest): d loss / d mask}`` as tlgeo's ``[senders, receivers]`` matrix (float64;
    0 off the graph): the negated sum over each tlgeo edge's auto-circuit edges. Raises ``KeyError`` naming the
    first auto-circuit edge that is missing."""
    out = torch.zeros(graph.n_senders, graph.n_receivers, dtype=torch.float64)
    for (s, r), edges in peer_edge_map(graph).items():
        missing = [e for e in edges if e not in peer]
        if missing:
            raise KeyError(f"auto-circuit has no edge {missing[0][0]}->{missing[0][1]}")
        out[s, r] = -sum(peer[e] for e in edges)
    return out


def compare(mine: torch.Tensor, theirs: torch.Tensor, valid: torch.Tensor) -> dict:
    """Over the edges ``valid``: ``rel`` = max |mine - theirs| / max |mine|, ``max_abs`` = max |mine - theirs|,
    ``scale`` = max |mine|, ``rank_agree`` = share of the top-20 edges by |score| the two have in common."""
    a, b = mine[valid].double(), theirs[valid].double()
    diff, scale = float((a - b).abs().max()), float(a.abs().max())
    k = min(20, a.numel())
    top_a, top_b = set(a.abs().topk(k).indices.tolist()), set(b.abs().topk(k).indices.tolist())
    return {
        "edges": int(valid.sum()),
        "rel": diff / scale if scale > 0 else float("nan"),
        "max_abs": diff,
        "scale": scale,
        "top20_common": len(top_a & top_b) / k,
    }


# --------------------------------------------------------------------------------------------- tlgeo's side
def hf_state(model) -> dict[str, torch.Tensor]:
    """The Hugging Face weights the bridge runs (float32, contiguous, its own names)."""
    sd = {
        n.replace("._original_component", ""): p.detach().float().contiguous()
        for n, p in model.original_model.named_parameters()
    }
    if "lm_head.weight" not in sd:  # tied: a copy (safetensors stores no shared tensors)
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"].clone()
    return sd


def llama_spec(model) -> dict:
    """What the peer needs to build the same Llama as a ``HookedTransformer``."""
    c = model.original_model.config
    if c.model_type != "llama":
        raise ValueError(f"the peer side builds Llama models only, got {c.model_type!r}")
    rope = getattr(c, "rope_parameters", None) or {}
    theta = rope.get("rope_theta", getattr(c, "rope_theta", 10000.0))
    d_head = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return {
        "d_model": c.hidden_size,
        "n_layers": c.num_hidden_layers,
        "n_heads": c.num_attention_heads,
        "n_kv": c.num_key_value_heads,
        "d_head": d_head,
        "d_mlp": c.intermediate_size,
        "d_vocab": c.vocab_size,
        "n_ctx": c.max_position_embeddings,
        "eps": c.rms_norm_eps,
        "rope_theta": float(theta),
    }


def write_exchange(d: Path, model, task, rounds: int, threads: int) -> None:
    from safetensors.torch import save_file

    save_file(hf_state(model), str(d / "weights.safetensors"))
    ans = [[int(i) for i in row if i >= 0] for row in task.correct]
    wrong = [[int(i) for i in row if i >= 0] or [0] for row in task.wrong]  # logprob: unused, auto-circuit wants one
    spec = {
        "model": llama_spec(model),
        "clean": task.clean.tolist(),
        "corrupted": task.corrupted.tolist(),
        "answers": ans,
        "wrong": wrong,
        "metric": task.metric,
        "rounds": rounds,
        "threads": threads,
    }
    (d / "inputs.json").write_text(json.dumps(spec))


def run_peer(model, task, rounds: int, threads: int, python: str = PEER_PYTHON, timeout: float = 1800) -> dict:
    """auto-circuit's scores and times on ``model`` / ``task`` from its environment (a subprocess)."""
    with tempfile.TemporaryDirectory(prefix="bench-circuits-") as tmp:
        d = Path(tmp)
        write_exchange(d, model, task, rounds, threads)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"OMP_NUM_THREADS": str(threads)}
        proc = subprocess.run(
            [python, __file__, "--peer-side", str(d)], capture_output=True, text=True, env=env, timeout=timeout
        )
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()
            raise RuntimeError(f"auto-circuit side failed: {tail[-1] if tail else proc.returncode}")
        return json.loads((d / "scores.json").read_text())


def tlgeo_side(model, task, rounds: int) -> dict:
    """tlgeo's EAP scores (``[senders, receivers]``), clean metric, and its EAP / plain-forward times per round."""
    from tlgeo.circuits.eap import eap_scores

    n = task.n
    metric = lambda logits, rows: task.subset(rows).score(logits)  # noqa: E731
    times, fwd = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        sc = eap_scores(model, task.clean, task.corrupted, metric, batch_size=n)
        times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        with torch.no_grad():
            logits = model(task.clean)
        fwd.append(time.perf_counter() - t0)
    clean = task.score(logits[:, -1]).double()
    return {"scores": sc.score, "graph": sc.graph, "clean": clean.numpy().tolist(), "times": times, "forward": fwd}


# --------------------------------------------------------------------------------------------- auto-circuit's side
def peer_side(d: Path) -> None:
    """Run in auto-circuit's environment: read ``d/inputs.json`` and the weights, write ``d/scores.json``."""
    spec = json.loads((d / "inputs.json").read_text())
    torch.set_num_threads(spec["threads"])
    from auto_circuit.data import PromptDataLoader, PromptDataset
    from auto_circuit.prune_algos.mask_gradient import mask_gradient_prune_scores
    from auto_circuit.utils.graph_utils import patchable_model
    from safetensors.torch import load_file

    model = peer_model(spec["model"], load_file(str(d / "weights.safetensors")))
    clean, corrupt = torch.tensor(spec["clean"]), torch.tensor(spec["corrupted"])
    answers = [torch.tensor(a) for a in spec["answers"]]
    wrong = [torch.tensor(w) for w in spec["wrong"]]
    grad_fn, answer_fn = PEER_METRIC[spec["metric"]]
    with torch.no_grad():
        logits = model(clean)[:, -1]
    vals = torch.log_softmax(logits, -1) if grad_fn == "logprob" else logits
    m = torch.stack(
        [
            vals[i, a].mean() - (0 if answer_fn == "avg_val" else vals[i, w].mean())
            for i, (a, w) in enumerate(zip(answers, wrong))
        ]
    )
    fwd, plain = timed_forwards(model, clean, spec["rounds"])
    loader = PromptDataLoader(
        PromptDataset(clean, corrupt, answers, wrong), seq_len=None, diverge_idx=0, batch_size=len(clean), shuffle=False
    )
    t0 = time.perf_counter()
    pm = patchable_model(model, factorized=True, slice_output="last_seq", separate_qkv=True, device=torch.device("cpu"))
    setup = time.perf_counter() - t0
    times = []
    for _ in range(spec["rounds"]):
        t0 = time.perf_counter()
        ps = mask_gradient_prune_scores(
            pm, loader, None, grad_function=grad_fn, answer_function=answer_fn, mask_val=0.0
        )
        times.append(time.perf_counter() - t0)
    edges = [[e.src.name, e.dest.name, float(e.prune_score(ps))] for e in pm.edges]
    out = {
        "edges": edges,
        "clean": m.double().tolist(),
        "times": times,
        "setup": setup,
        "forward": fwd,
        "versions": peer_versions(),
        "peak_gib": peak_gib(),
        "plain_forward": plain,
    }
    (d / "scores.json").write_text(json.dumps(out))


def timed_forwards(model, tokens: torch.Tensor, rounds: int) -> tuple[list[float], list[float]]:
    """Per round, the no-grad forward time of ``model`` as auto-circuit needs it (split q/k/v inputs, per-head
    results, ``hook_mlp_in``, ungrouped kv heads) and without those (TransformerLens's plain forward); before
    ``patchable_model`` wraps its modules."""
    flags = ("use_split_qkv_input", "use_attn_result", "use_hook_mlp_in", "ungroup_grouped_query_attention")
    kept = {f: getattr(model.cfg, f) for f in flags}
    times: dict[bool, list[float]] = {True: [], False: []}
    try:
        for _ in range(rounds):
            for on in (True, False):
                for f in flags:
                    setattr(model.cfg, f, kept[f] and on)
                t0 = time.perf_counter()
                with torch.no_grad():
                    model(tokens)
                times[on].append(time.perf_counter() - t0)
    finally:
        for f in flags:
            setattr(model.cfg, f, kept[f])
    return times[True], times[False]


def peak_gib() -> float:
    """This process's peak resident memory (GiB; Linux reports KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def peer_versions() -> str:
    from importlib.metadata import version

    return " ".join(f"{p}=={version(p)}" for p in ("auto-circuit", "transformer-lens", "torch"))


def peer_model(m: dict, sd: dict[str, torch.Tensor]):
    """A TransformerLens 2 ``HookedTransformer`` of the Llama ``m`` with the Hugging Face weights ``sd``,
    unprocessed (no folding, no centering), with the hooks auto-circuit's factorized graph needs."""
    import einops
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    gqa = m["n_kv"] != m["n_heads"]
    cfg = HookedTransformerConfig(
        d_model=m["d_model"],
        d_head=m["d_head"],
        n_heads=m["n_heads"],
        d_mlp=m["d_mlp"],
        n_layers=m["n_layers"],
        n_ctx=m["n_ctx"],
        d_vocab=m["d_vocab"],
        eps=m["eps"],
        act_fn="silu",
        normalization_type="RMS",
        positional_embedding_type="rotary",
        rotary_dim=m["d_head"],
        rotary_base=m["rope_theta"],
        rotary_adjacent_pairs=False,
        final_rms=True,
        gated_mlp=True,
        original_architecture="LlamaForCausalLM",
        n_key_value_heads=m["n_kv"] if gqa else None,
        ungroup_grouped_query_attention=gqa,
        dtype=torch.float32,
        default_prepend_bos=False,
        use_attn_result=True,
        use_split_qkv_input=True,
        use_hook_mlp_in=True,
    )
    u = "_" if gqa else ""
    w = {
        "embed.W_E": sd["model.embed_tokens.weight"],
        "ln_final.w": sd["model.norm.weight"],
        "unembed.W_U": sd["lm_head.weight"].T,
        "unembed.b_U": torch.zeros(m["d_vocab"]),
    }
    for l in range(m["n_layers"]):
        p = f"model.layers.{l}."
        heads = lambda x, n: einops.rearrange(sd[p + f"self_attn.{x}_proj.weight"], "(n h) m -> n m h", n=n)  # noqa
        w |= {
            f"blocks.{l}.ln1.w": sd[p + "input_layernorm.weight"],
            f"blocks.{l}.ln2.w": sd[p + "post_attention_layernorm.weight"],
            f"blocks.{l}.attn.W_Q": heads("q", m["n_heads"]),
            f"blocks.{l}.attn.{u}W_K": heads("k", m["n_kv"]),
            f"blocks.{l}.attn.{u}W_V": heads("v", m["n_kv"]),
            f"blocks.{l}.attn.W_O": einops.rearrange(
                sd[p + "self_attn.o_proj.weight"], "m (n h) -> n h m", n=m["n_heads"]
            ),
            f"blocks.{l}.attn.b_Q": torch.zeros(m["n_heads"], m["d_head"]),
            f"blocks.{l}.attn.{u}b_K": torch.zeros(m["n_kv"], m["d_head"]),
            f"blocks.{l}.attn.{u}b_V": torch.zeros(m["n_kv"], m["d_head"]),
            f"blocks.{l}.attn.b_O": torch.zeros(m["d_model"]),
            f"blocks.{l}.mlp.W_in": sd[p + "mlp.up_proj.weight"].T,
            f"blocks.{l}.mlp.W_gate": sd[p + "mlp.gate_proj.weight"].T,
            f"blocks.{l}.mlp.W_out": sd[p + "mlp.down_proj.weight"].T,
            f"blocks.{l}.mlp.b_in": torch.zeros(m["d_mlp"]),
            f"blocks.{l}.mlp.b_out": torch.zeros(m["d_model"]),
        }
    model = HookedTransformer(cfg)
    model.load_and_process_state_dict(
        w,
        fold_ln=False,
        center_writing_weights=False,
        center_unembed=False,
        fold_value_biases=False,
        refactor_factored_attn_matrices=False,
    )
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()


# --------------------------------------------------------------------------------------------- the bench
def side_by_side(model, task, rounds: int, threads: int, python: str = PEER_PYTHON) -> dict:
    """Both sides on ``model`` / ``task``: ``mine`` (:func:`tlgeo_side`), ``peer`` (auto-circuit's JSON, or None and
    ``why`` it did not run), and where it ran ``theirs`` (its scores as tlgeo's matrix), ``cmp`` (:func:`compare`),
    ``unmatched`` (auto-circuit edges no tlgeo edge maps to), ``clean_diff`` (max |clean metric difference|)."""
    mine = tlgeo_side(model, task, rounds)
    out = {"mine": mine, "peer": None}
    if not Path(python).exists():
        return out | {"why": f"no environment at {python} (see the docstring to build it)"}
    try:
        peer = run_peer(model, task, rounds, threads, python)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        return out | {"why": str(e)}
    g = mine["graph"]
    theirs = to_tlgeo(g, {(s, d): v for s, d, v in peer["edges"]})
    used = {e for es in peer_edge_map(g).values() for e in es}
    return out | {
        "peer": peer,
        "theirs": theirs,
        "cmp": compare(mine["scores"], theirs, g.valid),
        "unmatched": len({(s, d) for s, d, _ in peer["edges"]} - used),
        "clean_diff": float(np.abs(np.array(mine["clean"]) - np.array(peer["clean"])).max()),
    }


def bench_case(name: str, prompts: int, rounds: int, threads: int, python: str) -> list[dict]:
    from tlgeo.models import load_model
    from tlgeo.patching.tasks import build_task
    from tlgeo.train.zoo import zoo_model_dir

    spec, task_name = CASES[name]
    model = load_model(str(zoo_model_dir(spec.split("/", 1)[1])) if spec.startswith("zoo/") else spec)
    task = build_task(task_name, model, n=prompts, seed=0)
    got = side_by_side(model, task, rounds, threads, python)
    mine, peer = got["mine"], got["peer"]
    g = mine["graph"]
    settings = {
        "case": name,
        "model": spec,
        "task": task_name,
        "metric": task.metric,
        "prompts": prompts,
        "positions": task.clean.shape[1],
        "edges": g.n_edges,
        "threads": threads,
        "rounds": rounds,
    }
    t_mine, t_fwd = statistics.median(mine["times"]), statistics.median(mine["forward"])
    rows = [
        {
            **settings,
            "method": "tlgeo",
            "median_s": t_mine,
            "forward_s": t_fwd,
            "forward_equiv": t_mine / t_fwd,
            "peak_gib": peak_gib(),
            "package": package_version("tlgeo"),
        }
    ]
    print(
        f"{name}: {spec}, task {task_name} ({task.metric}), {prompts} prompts x {task.clean.shape[1]} positions, "
        f"{g.n_edges} edges, {threads} thread(s), medians of {rounds} rounds"
    )
    print(
        f"  tlgeo EAP      {t_mine:8.3f} s = {t_mine / t_fwd:.2f} forward-equivalents (its plain forward "
        f"{t_fwd:.4f} s; peak {peak_gib():.1f} GiB)"
    )
    if peer is None:
        print(f"  auto-circuit   not run: {got['why']}")
        return rows
    cmp, t_peer = got["cmp"], statistics.median(peer["times"])
    f_peer, f_plain = statistics.median(peer["forward"]), statistics.median(peer["plain_forward"])
    print(
        f"  auto-circuit   {t_peer:8.3f} s (+ {peer['setup']:.2f} s patchable_model once; its HookedTransformer's "
        f"forward {f_peer:.4f} s, {f_plain:.4f} s without auto-circuit's hooks; peak {peer['peak_gib']:.1f} GiB)  "
        f"[{peer['versions']}]"
    )
    print(f"  tlgeo / auto-circuit time: {t_mine / t_peer:.3f}")
    print(
        f"  scores over all {cmp['edges']} tlgeo edges (from {len(peer['edges'])} auto-circuit edges, "
        f"{got['unmatched']} unmatched): max |tlgeo - auto-circuit| / max |tlgeo| = {cmp['rel']:.2e} "
        f"(max |diff| {cmp['max_abs']:.2e}, max |score| {cmp['scale']:.3g}); top-20 edges in common "
        f"{cmp['top20_common']:.2f}; clean metric max |diff| {got['clean_diff']:.1e}"
    )
    rows[0] |= {"x_auto_circuit": t_mine / t_peer, "max_rel_diff": cmp["rel"]}
    rows.append(
        {
            **settings,
            "method": "auto_circuit",
            "median_s": t_peer,
            "setup_s": peer["setup"],
            "forward_s": f_peer,
            "plain_forward_s": f_plain,
            "x_auto_circuit": 1.0,
            "max_rel_diff": cmp["rel"],
            "max_abs_diff": cmp["max_abs"],
            "clean_metric_diff": got["clean_diff"],
            "peak_gib": peer["peak_gib"],
            "package": peer["versions"],
        }
    )
    return rows


def package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"{name}=={version(name)}"
    except PackageNotFoundError:
        return name


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="zoo,ioi", help=f"comma-separated, of {sorted(CASES)}")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--peer-python", default=PEER_PYTHON, help="the python of auto-circuit's environment")
    p.add_argument("--out", type=Path, default=None, help="append the rows to OUT/circuits_peers.csv (and provenance)")
    p.add_argument("--peer-side", type=Path, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.peer_side is not None:
        peer_side(args.peer_side)
        return []
    cases = [c for c in args.cases.split(",") if c]
    bad = [c for c in cases if c not in CASES]
    if bad:
        p.error(f"unknown case(s) {bad}; choose from {sorted(CASES)}")
    torch.set_num_threads(args.threads)
    rows = []
    for c in cases:
        rows += bench_case(c, args.prompts, args.rounds, args.threads, args.peer_python)
    if args.out:
        from tlgeo.runner.provenance import record_table

        record_table(
            args.out,
            "circuits_peers",
            rows,
            ["scripts/bench_circuits_peers.py", *(sys.argv[1:] if argv is None else argv)],
            vars(args),
        )
    return rows


if __name__ == "__main__":
    main()
