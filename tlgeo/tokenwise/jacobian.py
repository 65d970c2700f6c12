"""Ground truth for the local fits: the exact tokenwise map of one block and its Jacobian.

:func:`block_map` is ``f: h_l[p] -> h_{l+1}[p]`` of one token with every other
position of its sequence held fixed (a bridge, resumed at block ``l``; the
token's state is replaced at ``blocks.l.hook_resid_pre`` and read at
``blocks.l.hook_resid_post``). :func:`tokenwise_jacobian` is its Jacobian at the
token's own state. :func:`jacobian_agreement` samples ``k`` neighbours at a given
radius around the state, fits a local class on ``(x_j, f(x_j))`` and measures how
far the fitted ``A`` is from ``Jᵀ`` on the directions orthogonal to the state: a
map ``T(x) = A x`` without an offset matches ``f(x_0) + J (x - x_0)`` only there
(along ``x_0`` it must also carry the offset ``f(x_0) - J x_0``).
"""

from __future__ import annotations

from typing import Callable

import torch
from jaxtyping import Float, Int
from torch import Tensor

from ..errors import InputError
from ..geometry.local_maps import local_matrix
from ..hooks.resume import resume_forward
from ..models import Model

__all__ = ["block_map", "tokenwise_jacobian", "jacobian_agreement"]


def block_map(
    model: Model, tokens: Int[Tensor, "1 pos"], layer: int, position: int
) -> tuple[Float[Tensor, "d"], Callable[[Tensor], Tensor]]:
    """``(x0, f)``: the token's state ``h_layer[position]`` ``[d]`` and ``f(x [m, d]) -> [m, d]``."""
    if tokens.ndim != 2 or tokens.shape[0] != 1:
        raise InputError(f"tokens must be one sequence [1, pos], got shape {tuple(tokens.shape)}")
    if not 0 <= position < tokens.shape[1]:
        raise InputError(f"position {position} out of range for a sequence of {tokens.shape[1]} tokens")
    name_in = f"blocks.{layer}.hook_resid_pre"
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=name_in)
    resid = cache[name_in].float()  # [1, pos, d]
    x0 = resid[0, position].clone()

    def f(x: Tensor) -> Tensor:
        m = x.shape[0]
        r = resid.expand(m, -1, -1).clone()
        r[:, position] = x.to(r.dtype)
        out = {}

        def read(h, hook):
            out["h"] = h[:, position]
            return h

        # resumed at block ``layer`` and stopped after it: the later blocks and the unembedding do not run
        resume_forward(model, r, layer, [(f"blocks.{layer}.hook_resid_post", read)], stop_at_layer=layer + 1)
        return out["h"].float()

    return x0, f


def tokenwise_jacobian(model: Model, tokens: Int[Tensor, "1 pos"], layer: int, position: int) -> Float[Tensor, "d d"]:
    """``J [d, d]``, ``J[a, b] = d h_{l+1}[p]_a / d h_l[p]_b`` at the token's state (float32)."""
    x0, f = block_map(model, tokens, layer, position)
    with torch.enable_grad():
        return torch.autograd.functional.jacobian(lambda x: f(x[None])[0], x0)


def jacobian_agreement(
    model: Model,
    tokens: Int[Tensor, "1 pos"],
    layer: int,
    position: int,
    *,
    k: int,
    radius: float = 0.05,
    kind: str = "linear",
    seed: int = 0,
    **params,
) -> float:
    """``||(A - Jᵀ) P|| / ||Jᵀ P||`` (Frobenius) for the class-``kind`` fit on ``k`` neighbours
    ``x0 + radius ||x0|| u_j`` (``u_j`` uniform on the sphere), ``P`` the projector orthogonal to ``x0``."""
    x0, f = block_map(model, tokens, layer, position)
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(k, x0.shape[0], generator=g)
    u = u / u.norm(dim=-1, keepdim=True)
    x = x0 + radius * x0.norm() * u
    with torch.no_grad():
        y = f(x)
        a = local_matrix(kind, x[None].double(), y[None].double(), **params)[0]  # q -> q a
    j = tokenwise_jacobian(model, tokens, layer, position).double()
    xh = (x0 / x0.norm()).double()
    p = torch.eye(len(xh), dtype=torch.float64) - torch.outer(xh, xh)
    return float(torch.linalg.norm(p @ (a - j.T)) / torch.linalg.norm(p @ j.T))
