"""The tracr family on the zoo's compiled programs: ``load_model`` boots each one and the torch model reproduces
tracr's own outputs (the final residual stream and the decoded answers that ``scripts/compile_tracr.py`` exported
from tracr's Haiku model, not from this code), bidirectional programs attend both ways, and the ground-truth
graph names exactly the components whose weights are not zero."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tlgeo.families import family_of
from tlgeo.models import load_model

ZOO = Path(__file__).resolve().parents[2] / "zoo"
PROGRAMS = ["frac-prevs", "reverse", "hist", "sort", "detect-pattern"]


@pytest.fixture(scope="module", params=PROGRAMS)
def program(request):
    folder = ZOO / f"tracr-{request.param}"
    truth = json.loads((folder / "tracr.json").read_text())
    return load_model(str(folder)), truth, np.load(folder / "reference.npz")


def test_a_compiled_program_is_the_tracr_family_and_keeps_its_mask(program):
    model, truth, _ = program
    assert family_of(model).name == "tracr"
    assert model.cfg.attention_dir == ("causal" if truth["causal"] else "bidirectional")
    assert model.cfg.d_vocab_out == len(truth["output_labels"])
    assert model.tokenizer.convert_ids_to_tokens(model.to_tokens(" ".join(truth["vocab"]))[0].tolist()) == [
        truth["bos"],
        *truth["vocab"],
    ]  # BOS first, one token per value


def test_the_torch_model_reproduces_tracrs_outputs(program):
    model, truth, ref = program
    n_layers, decoded = model.cfg.n_layers, truth["reference"]["decoded"]
    lengths = (ref["tokens"] >= 0).sum(1)
    checked = 0
    for length in np.unique(lengths):
        rows = np.flatnonzero(lengths == length)
        toks = torch.tensor(ref["tokens"][rows, :length])
        with torch.no_grad():
            logits, cache = model.run_with_cache(toks)
        final = cache[f"blocks.{n_layers - 1}.hook_resid_post"]
        want = torch.tensor(ref["residual"][rows, :length])
        torch.testing.assert_close(final, want, rtol=1e-4, atol=1e-3)  # tracr's own residual stream, float32
        for i, row in enumerate(rows):
            out = logits[i, 1:]  # position 0 is BOS: tracr decodes it as BOS
            if truth["output_kind"] == "numerical":
                np.testing.assert_allclose(out[:, 0].numpy(), decoded[row][1:], atol=1e-4)
            else:
                assert [truth["output_values"][j] for j in out.argmax(-1).tolist()] == decoded[row][1:]
            checked += 1
    assert checked == len(decoded) == 64


def test_bidirectional_programs_read_later_tokens_and_causal_ones_do_not(program):
    """Changing the last token moves the first position's output exactly when the program is bidirectional
    (reverse: position 1 answers the last token)."""
    model, truth, ref = program
    toks = torch.tensor(ref["tokens"][:1])  # a full-length input
    other = toks.clone()
    other[0, -1] = [i for v, i in truth["input_encoding"].items() if v in truth["vocab"] and i != toks[0, -1]][0]
    with torch.no_grad():
        moved = (model(toks)[0, 1] - model(other)[0, 1]).abs().max().item()
    if truth["program"] == "reverse":
        assert moved > 0.5
    if truth["causal"]:
        assert moved == 0.0


def _nonzero(w: torch.Tensor, dim: int) -> set[int]:
    """The indices along ``dim`` of ``w``'s nonzero slices."""
    return set(torch.nonzero(w.detach().abs().amax(dim=dim) > 0).flatten().tolist())


def _edges_from_weights(model) -> set[tuple[str, str, str]]:
    """Every (sender, receiver, port) whose receiver's input weights read a residual direction the sender's output
    weights write, from the booted model's own weights (torch Linear weights are [out, in])."""
    cfg, d = model.cfg, model.cfg.d_head
    writes = {
        "input": _nonzero(model.embed.original_component.weight, 0)
        | _nonzero(model.pos_embed.original_component.weight, 0)
    }
    reads, order = {("output", "out"): _nonzero(model.unembed.original_component.weight, 0)}, {"input": -1}
    order["output"] = 2 * cfg.n_layers
    for layer in range(cfg.n_layers):
        attn, mlp = model.blocks[layer].attn, model.blocks[layer].mlp
        for h in range(cfg.n_heads):
            rows = slice(h * d, (h + 1) * d)
            name = f"L{layer}H{h}"
            writes[name], order[name] = _nonzero(attn.o.original_component.weight[:, rows], 1), 2 * layer
            for port in ("q", "k", "v"):
                reads[(name, port)] = _nonzero(getattr(attn, port).original_component.weight[rows], 0)
        name = f"MLP{layer}"
        writes[name], order[name] = _nonzero(mlp.out.original_component.weight, 1), 2 * layer + 1
        reads[(name, "in")] = _nonzero(getattr(mlp, "in").original_component.weight, 0)
    return {
        (s, r, p) for (r, p), got in reads.items() for s, put in writes.items() if order[s] < order[r] and got & put
    }


def test_the_ground_truth_is_the_booted_models_weights(program):
    """tracr.json's heads and MLPs are exactly those whose output weights are not zero, and its edges exactly the
    reads of written directions that the booted model's weights make (exported from tracr's Haiku parameters,
    checked here on the torch model's)."""
    from tlgeo.models.tracr_truth import program_heads, program_mlps, truth_edges

    model, truth, _ = program
    found = _edges_from_weights(model)
    assert truth_edges(truth) == found and found
    senders = {s for s, _, _ in found} - {"input"}
    assert senders == {f"L{l}H{h}" for l, h in program_heads(truth)} | {f"MLP{l}" for l in program_mlps(truth)}
    labels = truth["residual_labels"]
    for e in truth["edges"]:  # the directions named are the shared ones, by label
        assert all(lab in labels for lab in e["directions"]) and e["sops"]


def test_more_positions_than_compiled_fail_in_one_line():
    model = load_model(str(ZOO / "tracr-frac-prevs"))
    with pytest.raises(ValueError, match=r"7 positions: this model has 6 \(a compiled program: BOS and max_seq_len"):
        model(torch.zeros(1, 7, dtype=torch.long))


def test_the_ground_truth_edges_are_the_programs():
    """frac_prevs: an MLP computes tokens == x, one head averages it over positions <= its own (queries and keys
    from the positions); hist: RASP's selector width, a head attending to BOS and the same tokens, its output turned
    into a count by an MLP. Written from the programs, not read from the export."""
    from tlgeo.models.tracr_truth import program_heads, program_mlps, program_truth, truth_edges

    frac = program_truth(load_model(str(ZOO / "tracr-frac-prevs")))
    assert truth_edges(frac) == {
        ("input", "MLP0", "in"),
        ("input", "L1H0", "q"),
        ("input", "L1H0", "k"),
        ("MLP0", "L1H0", "v"),
        ("L1H0", "output", "out"),
    }
    assert program_heads(frac) == [(1, 0)] and program_mlps(frac) == [0]
    hist = program_truth(ZOO / "tracr-hist")
    assert truth_edges(hist, ports=False) == {
        ("input", "L0H0"),
        ("input", "MLP0"),
        ("L0H0", "MLP0"),
        ("MLP0", "output"),
    }
    assert {e["port"] for e in hist["edges"] if e["receiver"] == "L0H0"} == {"q", "k", "v"}


def test_a_folder_without_a_program_is_named(tmp_path):
    from tlgeo.models import UnknownModelError
    from tlgeo.models.tracr_truth import program_truth

    with pytest.raises(UnknownModelError, match=f"{tmp_path}: no tracr.json, so no compiled tracr program"):
        program_truth(tmp_path)


def test_edge_scores_count_the_programs_edges():
    from tlgeo.models.tracr_truth import edge_scores, program_truth

    truth = program_truth(ZOO / "tracr-frac-prevs")  # 5 edges
    got = edge_scores([("MLP0", "L1H0", "v"), ("L1H0", "output", "out"), ("L0H0", "L1H0", "v")], truth)
    assert got["precision"] == 2 / 3 and got["recall"] == 2 / 5 and got["extra"] == [("L0H0", "L1H0", "v")]
    assert got["missed"] == [("input", "L1H0", "k"), ("input", "L1H0", "q"), ("input", "MLP0", "in")]
    assert edge_scores([("MLP0", "L1H0")], truth, ports=False)["precision"] == 1.0
    with pytest.raises(ValueError, match=r"edges are \(sender, receiver, port\) tuples; got some of \[2\]"):
        edge_scores([("MLP0", "L1H0")], truth)
