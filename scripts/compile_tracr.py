"""Compile RASP programs with tracr and export each to ``zoo/tracr-<program>/``: the weights as a Hugging Face
folder tlgeo boots (``config.json`` of ``model_type`` ``tracr``, ``model.safetensors``, a word-level
``tokenizer.json``), the ground truth (``tracr.json``: vocab, encodings, residual layout, the heads and MLPs the
program uses, the edges between them) and tracr's own outputs on seeded inputs (``reference.npz``).

tracr needs JAX and Haiku, which tlgeo never imports: run this in a separate environment::

    python3 -m venv /work/venv-tracr && /work/venv-tracr/bin/pip install tracr-pypi safetensors
    /work/venv-tracr/bin/python scripts/compile_tracr.py [--out zoo] [--programs frac_prevs ... detect_pattern]

The project reads the exported files only (``tlgeo.models.tracr``, ``tlgeo.patching.tasks.tracr``).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import numpy as np

# the programs: (builder, vocab, max_seq_len, causal, what it computes)
MAX_SEQ_LEN = 5
N_REFERENCE = 64
SCHEMA = "tlgeo-tracr-ground-truth/1"


def _programs():
    from tracr.compiler import lib
    from tracr.rasp import rasp

    return {
        "frac_prevs": (
            lambda: lib.make_frac_prevs(rasp.tokens == "x"),
            ["a", "b", "x"],
            True,
            "fraction of the tokens so far (this one included) that are x",
        ),
        "reverse": (lambda: lib.make_reverse(rasp.tokens), ["a", "b", "c"], False, "the input reversed"),
        "hist": (lib.make_hist, ["a", "b", "c"], False, "how often each position's token occurs in the input"),
        "sort": (
            lambda: lib.make_sort(rasp.tokens, rasp.tokens, max_seq_len=MAX_SEQ_LEN, min_key=1),
            [1, 2, 3, 4],
            False,
            "the input sorted ascending",
        ),
        "detect_pattern": (
            lambda: lib.detect_pattern(rasp.tokens, "abc"),
            ["a", "b", "c"],
            True,
            "whether the tokens ending here are a b c",
        ),
    }


def _nonzero_rows(w: np.ndarray) -> np.ndarray:
    return np.flatnonzero(np.abs(w).max(axis=1) > 0)


def _labels(idx, residual: list[str]) -> list[str]:
    return [residual[i] for i in idx]


def _components(params: dict, cfg, residual: list[str], out_labels: list[str]) -> tuple[list, list]:
    """The used components (input, heads, MLPs, output) with the residual labels each reads and writes."""
    ks, n_heads = cfg.key_size, cfg.num_heads
    emb = np.concatenate([params["token_embed"]["embeddings"], params["pos_embed"]["embeddings"]])
    comps = [
        dict(
            node="input",
            kind="input",
            layer=None,
            head=None,
            order=-1,
            reads={},
            writes=_labels(np.flatnonzero(np.abs(emb).max(0) > 0), residual),
        )
    ]
    for layer in range(cfg.num_layers):
        attn = f"transformer/layer_{layer}/attn/"
        for h in range(n_heads):
            cols = slice(h * ks, (h + 1) * ks)
            reads = {
                p: _labels(_nonzero_rows(params[attn + name]["w"][:, cols]), residual)
                for p, name in (("q", "query"), ("k", "key"), ("v", "value"))
            }
            writes = _labels(np.flatnonzero(np.abs(params[attn + "linear"]["w"][cols]).max(0) > 0), residual)
            if writes:
                comps.append(
                    dict(
                        node=f"L{layer}H{h}",
                        kind="head",
                        layer=layer,
                        head=h,
                        order=2 * layer,
                        reads=reads,
                        writes=writes,
                    )
                )
        mlp = f"transformer/layer_{layer}/mlp/"
        writes = _labels(np.flatnonzero(np.abs(params[mlp + "linear_2"]["w"]).max(0) > 0), residual)
        if writes:
            comps.append(
                dict(
                    node=f"MLP{layer}",
                    kind="mlp",
                    layer=layer,
                    head=None,
                    order=2 * layer + 1,
                    reads={"in": _labels(_nonzero_rows(params[mlp + "linear_1"]["w"]), residual)},
                    writes=writes,
                )
            )
    comps.append(
        dict(
            node="output",
            kind="output",
            layer=None,
            head=None,
            order=2 * cfg.num_layers,
            reads={"out": out_labels},
            writes=[],
        )
    )
    return comps, _edges(comps)


def _sop(label: str) -> str:
    return label.split(":", 1)[0]


def _edges(comps: list) -> list:
    """sender -> receiver input wherever the receiver reads a residual direction the sender writes."""
    edges = []
    for r in comps:
        for port, reads in r["reads"].items():
            for s in comps:
                if s["order"] >= r["order"]:
                    continue
                shared = [lab for lab in reads if lab in s["writes"]]
                if shared:
                    edges.append(
                        dict(
                            sender=s["node"],
                            receiver=r["node"],
                            port=port,
                            sops=sorted({_sop(lab) for lab in shared}),
                            directions=shared,
                        )
                    )
    return edges


def _hf_weights(params: dict, cfg, n_out: int, out_idx: list[int], vocab_size: int) -> dict[str, np.ndarray]:
    """tracr's Haiku parameters under the Hugging Face names of ``tlgeo.models.tracr`` (Linear: [out, in]); the
    token embedding padded with zero rows to ``vocab_size``."""
    f = lambda a: np.ascontiguousarray(np.asarray(a, dtype=np.float32))  # noqa: E731
    tokens = params["token_embed"]["embeddings"]
    d = tokens.shape[1]
    padded = np.zeros((vocab_size, d), dtype=np.float32)
    padded[: len(tokens)] = tokens
    w = {"model.embed_tokens.weight": padded, "model.embed_positions.weight": f(params["pos_embed"]["embeddings"])}
    for layer in range(cfg.num_layers):
        pre, attn, mlp = f"model.layers.{layer}.", f"transformer/layer_{layer}/attn/", f"transformer/layer_{layer}/mlp/"
        for hf, tr in (("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value"), ("o_proj", "linear")):
            w[pre + f"self_attn.{hf}.weight"] = f(params[attn + tr]["w"].T)
            w[pre + f"self_attn.{hf}.bias"] = f(params[attn + tr]["b"])
        for hf, tr in (("fc_in", "linear_1"), ("fc_out", "linear_2")):
            w[pre + f"mlp.{hf}.weight"] = f(params[mlp + tr]["w"].T)
            w[pre + f"mlp.{hf}.bias"] = f(params[mlp + tr]["b"])
    unembed = np.zeros((n_out, d), dtype=np.float32)
    unembed[np.arange(n_out), out_idx] = 1.0  # tracr's unembedding: the projection onto the output space
    w["lm_head.weight"] = unembed
    return w


def _tokenizer_json(vocab: dict[str, int], bos: str, pad: str) -> dict:
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": vocab[t],
                "content": t,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for t in (bos, pad)
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": pad},
    }


def _reference(model, vocab: list, n: int, seed: int, categorical: bool, out_idx: list[int]) -> dict:
    """tracr's own outputs on ``n`` seeded inputs of every length up to ``MAX_SEQ_LEN`` (BOS first)."""
    rng = random.Random(seed)
    tokens, final, decoded = [], [], []
    for i in range(n):
        length = MAX_SEQ_LEN if i % 2 == 0 else rng.randint(1, MAX_SEQ_LEN)
        inp = ["BOS"] + [rng.choice(vocab) for _ in range(length)]
        out = model.apply(inp)
        ids = model.input_encoder.encode(inp)
        row = np.full(MAX_SEQ_LEN + 1, -1, dtype=np.int64)
        row[: len(ids)] = ids
        res = np.zeros((MAX_SEQ_LEN + 1, len(model.residual_labels)), dtype=np.float32)
        res[: len(ids)] = np.asarray(out.transformer_output[0])
        tokens.append(row)
        final.append(res)
        decoded.append(
            [
                None if v is None else (v if isinstance(v, str) else float(v)) if not categorical else str(v)
                for v in out.decoded
            ]
        )
        unembedded = np.asarray(out.unembedded[0])
        mine = res[: len(ids)][:, out_idx]
        check = mine.argmax(-1) if categorical else mine[:, 0]
        assert np.allclose(check[1:], unembedded[1:], atol=1e-5), "the exported unembedding differs from tracr's"
    return dict(tokens=np.stack(tokens), residual=np.stack(final)), decoded


def _output_labels(model, residual: list[str], label: str, categorical: bool) -> list[str]:
    """The residual labels of the program's output space (a categorical one in its output encoder's order)."""
    out_labels = [lab for lab in residual if lab == label or lab.startswith(label + ":")]
    if categorical:  # the output space's order is the output encoder's
        values = sorted(model.output_encoder.encoding_map, key=model.output_encoder.encoding_map.get)
        out_labels = [f"{label}:{v}" for v in values]
    return out_labels


def _hf_config(cfg, residual: list[str], out_labels: list[str], tok_vocab: dict, causal: bool, categorical: bool):
    """The ``config.json`` of ``model_type`` ``tracr`` that ``tlgeo.models.tracr`` boots."""
    # ids past the tokenizer's are unused zero rows: the answers (output-space indices) stay below d_vocab, as every
    # tlgeo task checks
    vocab_size = max(len(tok_vocab), len(out_labels))
    return {
        "architectures": ["TracrForCausalLM"],
        "model_type": "tracr",
        "vocab_size": vocab_size,
        "hidden_size": len(residual),
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "head_dim": cfg.key_size,
        "intermediate_size": cfg.mlp_hidden_size,
        "output_size": len(out_labels),
        "max_position_embeddings": MAX_SEQ_LEN + 1,
        "causal": bool(causal),
        "bos_token_id": tok_vocab["BOS"],
        "pad_token_id": tok_vocab["PAD"],
        "eos_token_id": None,
        "tie_word_embeddings": False,
        "output_kind": "categorical" if categorical else "numerical",
        "dtype": "float32",
    }


def _tokenizer_config() -> dict:
    """``tokenizer_config.json``: the fast tokenizer of ``tokenizer.json`` with BOS and PAD (PAD also unknown)."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "BOS",
        "pad_token": "PAD",
        "unk_token": "PAD",
        "model_max_length": MAX_SEQ_LEN + 1,
        "clean_up_tokenization_spaces": False,
    }


def _write_hf_folder(folder: Path, model, config: dict, out_labels: list[str], out_idx: list[int], tok_vocab: dict):
    """Write the Hugging Face folder: ``config.json``, ``model.safetensors``, ``tokenizer[_config].json``."""
    from safetensors.numpy import save_file

    cfg = model.model_config
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    weights = _hf_weights(model.params, cfg, len(out_labels), out_idx, config["vocab_size"])
    save_file(weights, str(folder / "model.safetensors"))
    (folder / "tokenizer.json").write_text(json.dumps(_tokenizer_json(tok_vocab, "BOS", "PAD"), indent=1) + "\n")
    (folder / "tokenizer_config.json").write_text(json.dumps(_tokenizer_config(), indent=2) + "\n")


def _ground_truth(
    name: str,
    what: str,
    model,
    *,
    label: str,
    vocab: list,
    causal: bool,
    categorical: bool,
    config: dict,
    tok_vocab: dict,
    out_labels: list[str],
    residual: list[str],
    comps: list,
    edges: list,
    decoded: list,
) -> dict:
    """``tracr.json``: the program, its encodings, residual layout, components and edges, and the decoded reference."""
    cfg = model.model_config
    output_values = (
        sorted(model.output_encoder.encoding_map, key=model.output_encoder.encoding_map.get) if categorical else None
    )
    return {
        "schema": SCHEMA,
        "program": name,
        "description": what,
        "rasp_label": label,
        "causal": bool(causal),
        "max_seq_len": MAX_SEQ_LEN,
        "vocab": [str(v) for v in vocab],
        "bos": "BOS",
        "pad": "PAD",
        "input_encoding": tok_vocab,
        "output_kind": config["output_kind"],
        "output_values": None if output_values is None else [str(v) for v in output_values],
        "output_labels": out_labels,
        "residual_labels": residual,
        "nodes": [{k: c[k] for k in ("node", "kind", "layer", "head", "reads", "writes")} for c in comps],
        "edges": edges,
        "reference": {"inputs": "reference.npz", "decoded": decoded},
        "tracr": {
            "num_layers": cfg.num_layers,
            "num_heads": cfg.num_heads,
            "key_size": cfg.key_size,
            "mlp_hidden_size": cfg.mlp_hidden_size,
            "mlp_exactness": 100,
        },
    }


def compile_program(name: str, out: Path, seed: int = 0) -> Path:
    """Compile program ``name`` with tracr and export it to ``out/tracr-<name>/``; that folder."""
    from tracr.compiler import compiling
    from tracr.transformer.encoder import CategoricalEncoder

    build, vocab, causal, what = _programs()[name]
    program = build()
    model = compiling.compile_rasp_to_model(
        program, vocab=set(vocab), max_seq_len=MAX_SEQ_LEN, causal=causal, compiler_bos="BOS", compiler_pad="PAD"
    )
    cfg, residual = model.model_config, list(model.residual_labels)
    categorical = isinstance(model.output_encoder, CategoricalEncoder)
    label = program.label
    out_labels = _output_labels(model, residual, label, categorical)
    out_idx = [residual.index(lab) for lab in out_labels]
    comps, edges = _components(model.params, cfg, residual, out_labels)
    tok_vocab = {str(k): int(v) for k, v in model.input_encoder.encoding_map.items()}
    folder = out / f"tracr-{name.replace('_', '-')}"
    folder.mkdir(parents=True, exist_ok=True)
    config = _hf_config(cfg, residual, out_labels, tok_vocab, causal, categorical)
    _write_hf_folder(folder, model, config, out_labels, out_idx, tok_vocab)
    ref, decoded = _reference(model, vocab, N_REFERENCE, seed, categorical, out_idx)
    np.savez_compressed(folder / "reference.npz", **ref)
    truth = _ground_truth(
        name,
        what,
        model,
        label=label,
        vocab=vocab,
        causal=causal,
        categorical=categorical,
        config=config,
        tok_vocab=tok_vocab,
        out_labels=out_labels,
        residual=residual,
        comps=comps,
        edges=edges,
        decoded=decoded,
    )
    (folder / "tracr.json").write_text(json.dumps(truth, indent=1) + "\n")
    return folder


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "zoo")
    p.add_argument("--programs", nargs="+", default=list(_programs()), choices=list(_programs()))
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    for name in args.programs:
        folder = compile_program(name, args.out, args.seed)
        truth = json.loads((folder / "tracr.json").read_text())
        used = [n["node"] for n in truth["nodes"] if n["kind"] in ("head", "mlp")]
        print(f"{folder}: {', '.join(used)}; {len(truth['edges'])} edges")


if __name__ == "__main__":
    main()
