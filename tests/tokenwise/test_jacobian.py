"""The tokenwise Jacobian of a block, and local fits that approach it, on a tiny model."""

import pytest
import torch

from tlgeo.tokenwise.jacobian import block_map, jacobian_agreement, tokenwise_jacobian

TOKENS = torch.randint(1, 200, (1, 10), generator=torch.Generator().manual_seed(0))


def test_block_map_is_the_block_and_its_jacobian_matches_finite_differences(llama):
    x0, f = block_map(llama, TOKENS, 1, 4)
    _, cache = llama.run_with_cache(TOKENS)
    torch.testing.assert_close(f(x0[None])[0], cache["blocks.1.hook_resid_post"][0, 4], rtol=1e-5, atol=1e-5)
    j = tokenwise_jacobian(llama, TOKENS, 1, 4)
    assert j.shape == (llama.cfg.d_model, llama.cfg.d_model)
    h = 1e-2 * x0.norm()
    for b in (0, 7, 31):
        e = torch.zeros_like(x0)
        e[b] = h
        fd = (f((x0 + e)[None]) - f((x0 - e)[None]))[0] / (2 * h)
        torch.testing.assert_close(fd, j[:, b], rtol=2e-2, atol=2e-3)


def test_local_fits_approach_the_jacobian_as_k_grows(llama):
    d = llama.cfg.d_model
    ks = (d, 2 * d, 4 * d, 8 * d)
    errs = [jacobian_agreement(llama, TOKENS, 1, 4, k=k, radius=0.01, ridge=1e-9) for k in ks]
    assert errs[1] > errs[2] > errs[3] and errs[3] < 0.05, errs  # the error falls about as 1 / sqrt(k)
    assert errs[0] > errs[1]  # k = d without ridge: exact interpolation, the classic error peak
    diag = jacobian_agreement(llama, TOKENS, 1, 4, k=8 * d, radius=0.01, kind="diag_psd")
    assert diag > 5 * errs[-1]  # a diagonal map cannot be the block's Jacobian


def test_bad_positions():
    from tlgeo.models import tiny_model

    m = tiny_model("llama")
    with pytest.raises(ValueError, match="position 10 out of range"):
        block_map(m, TOKENS, 0, 10)
    with pytest.raises(ValueError, match="one sequence"):
        block_map(m, TOKENS.expand(2, -1), 0, 1)
