import pytest
import torch

from tlgeo.hooks.edits import Edit
from tlgeo.hooks.resume import resume_forward


@pytest.mark.parametrize("layer", [0, 1, 2])
def test_resume_forward_equals_full_edited_forward(tiny, tokens, layer):
    e = Edit("value_excl_self", s_par=0.3, s_perp=0.6, layers=layer, skip_first=0)
    with torch.inference_mode():
        full = tiny.run_with_hooks(tokens, fwd_hooks=e.hooks(tiny))
        clean, cache = tiny.run_with_cache(tokens, names_filter=f"blocks.{layer}.hook_resid_pre")
        resid = cache[f"blocks.{layer}.hook_resid_pre"]
        fired, ran = [], []
        probe = [(f"blocks.{layer}.attn.hook_z", lambda z, hook: fired.append(layer))]
        handle = tiny.blocks[0].original_component.register_forward_hook(lambda *a: ran.append(1))
        try:
            out = resume_forward(tiny, resid, layer, e.hooks(tiny) + probe)
            plain = resume_forward(tiny, resid, layer)
        finally:
            handle.remove()
    torch.testing.assert_close(out, full, rtol=0, atol=1e-5)
    torch.testing.assert_close(plain, clean, rtol=0, atol=1e-5)
    assert (out - clean).abs().max() > 1e-4  # the edit did something
    assert fired == [layer]  # hooks at the start block fire, once
    assert len(ran) == (2 if layer == 0 else 0)  # earlier blocks are skipped, not run
    assert not any(
        "forward" in vars(m) for m in tiny.modules() if m is not tiny
    )  # nothing left patched (the bridge: inputs_follow_model)
    with torch.inference_mode():
        torch.testing.assert_close(tiny(tokens), clean, rtol=0, atol=0)
    if layer > 0:
        with pytest.raises(ValueError, match="before block"):
            resume_forward(tiny, resid, layer, Edit("attn", s_par=0, layers=0, skip_first=0).hooks(tiny))


def test_resume_forward_stops_before_a_later_block(tiny, tokens):
    with torch.inference_mode():
        _, cache = tiny.run_with_cache(tokens)
        ran = []
        handle = tiny.blocks[2].original_component.register_forward_hook(lambda *a: ran.append(1))
        try:
            h = resume_forward(tiny, cache["blocks.1.hook_resid_pre"], 1, stop_at_layer=2)
        finally:
            handle.remove()
    torch.testing.assert_close(h, cache["blocks.1.hook_resid_post"], rtol=0, atol=0)
    assert not ran  # block 2 and the unembedding are not run
    with pytest.raises(ValueError, match="stop_at_layer 1 must be in 2..3"):
        resume_forward(tiny, cache["blocks.1.hook_resid_pre"], 1, stop_at_layer=1)


def test_activations_equal_the_cache_and_end_the_forward_at_the_last_one(tiny, tokens):
    from tlgeo.hooks.resume import activations

    names = ["blocks.0.hook_resid_pre", "blocks.1.hook_resid_post", "blocks.0.attn.hook_z"]
    edit = Edit("attn", s_par=0, layers=1, skip_first=0).hooks(tiny)
    with torch.inference_mode():
        with tiny.hooks(fwd_hooks=edit):
            _, cache = tiny.run_with_cache(tokens, names_filter=lambda n: n in names)
        ran = []
        handles = [
            tiny.blocks[2].original_component.register_forward_hook(lambda *a: ran.append("block 2")),
            tiny.unembed.register_forward_hook(lambda *a: ran.append("unembed")),
        ]
        try:
            got = activations(tiny, tokens, names, edit)
        finally:
            for h in handles:
                h.remove()
    assert sorted(got) == sorted(names) and not ran  # the edit applied, then nothing after block 1
    for n in names:
        torch.testing.assert_close(got[n], cache[n], rtol=0, atol=0)
