"""Where an update and its reference come from: the site registry.

A :class:`Site` names, for one block ``L``, the hook whose output is edited
(``target``), the hooks read earlier in the same forward (``reads``), and how
the update ``y`` and its reference ``r`` are obtained from them. Hook names are
TransformerLens names relative to ``blocks.L``.

| site              | edited hook          | update ``y``             | reference ``r``        |
|-------------------|----------------------|--------------------------|------------------------|
| ``attn``          | ``hook_attn_out``    | attention output         | ``hook_resid_pre``     |
| ``mlp``           | ``hook_mlp_out``     | MLP output               | ``hook_resid_mid`` (``hook_resid_pre`` for parallel attn+MLP blocks, ``ln1.hook_out`` post-LN) |
| ``block``         | ``hook_resid_post``  | ``resid_post - resid_pre`` | ``hook_resid_pre``   |
| ``value_full``    | ``attn.hook_z``      | ``o_t`` per head         | ``v_t`` of its KV head |
| ``value_excl_self`` | ``attn.hook_z``    | ``c_t = o_t - A_tt v_t`` | ``v_t`` of its KV head |
| ``diag``          | ``attn.hook_pattern`` | (pattern edit: ``A_tt`` scaled by ``s_par``, rows renormalised) | — |
"""  # noqa: E501

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, NamedTuple

from torch import Tensor

from ..errors import UnknownNameError
from ..families import family_of
from ..geometry.value_space import group_heads, self_weights

__all__ = ["Site", "Update", "SITES", "DECOMPOSITION_SITES", "get_site", "UnknownSiteError"]


class UnknownSiteError(UnknownNameError):
    """A site name that is not in :data:`SITES`."""


class Update(NamedTuple):
    """The update being decomposed and its reference (broadcastable to ``y``).

    ``y`` holds the target's elements in the target's order but may be shaped
    differently: per-head sites group query heads by their KV head,
    ``[batch, pos, kv, group, d_head]`` with ``ref = v[..., None, :]``, so GQA
    needs no copy of ``v``; ``y.reshape(target.shape)`` restores the layout.
    """

    y: Tensor
    ref: Tensor


Decompose = Callable[[Tensor, Mapping[str, Tensor]], Update]
Reads = tuple[tuple[str, str], ...]  # (role, hook relative to the block)


@dataclass(frozen=True)
class Site:
    """One place in a block where an update is split (or a pattern edited).

    ``decompose(target, reads)`` gets the target hook's tensor and the
    tensors read earlier in the forward, keyed by role (``"ref"``, ``"v"``,
    ``"pattern"``).
    """

    name: str
    target: str
    reads: Reads
    per_head: bool
    decompose: Decompose | None
    description: str
    parallel_block_reads: Reads | None = None  # reads for parallel attn+MLP blocks
    post_ln_reads: Reads | None = None  # reads for post-LN blocks (the residual renormalised after each add)

    def __repr__(self) -> str:  # its name: the registry holds the rest (functions, hook lists)
        return f"Site({self.name!r})"

    def read_hooks(self, model) -> Reads:
        """``(role, hook)`` pairs to read on ``model``: for parallel and post-LN blocks, by the model's own
        config flags where it has them, else by its family's traits."""
        family = family_of(model)
        cfg = getattr(model, "cfg", model)
        # the model's own flags where its config has them (a GPT-NeoX checkpoint may turn the parallel residual
        # off), else its family's traits
        parallel = getattr(cfg, "parallel_attn_mlp", None)
        parallel = (family is not None and family.parallel) if parallel is None else bool(parallel)
        pre_ln = getattr(cfg, "do_layer_norm_before", None)
        post_ln = (family is not None and family.post_ln) if pre_ln is None else pre_ln is False
        if self.parallel_block_reads is not None and parallel:
            return self.parallel_block_reads
        if self.post_ln_reads is not None and post_ln:
            return self.post_ln_reads
        return self.reads

    @property
    def is_decomposition(self) -> bool:
        return self.decompose is not None


def _residual(x: Tensor, reads: Mapping[str, Tensor]) -> Update:
    return Update(x, reads["ref"])


def _block(x: Tensor, reads: Mapping[str, Tensor]) -> Update:
    pre = reads["ref"]
    return Update(x - pre, pre)


def _last(v: Tensor, q: int) -> Tensor:
    """The last ``q`` positions of ``[batch, k, ...]`` (the queries, with a KV cache)."""
    return v[:, v.shape[1] - q :]


def _value_full(z: Tensor, reads: Mapping[str, Tensor]) -> Update:
    v = _last(reads["v"], z.shape[1])
    return Update(group_heads(z, v.shape[-2]), v.unsqueeze(-2))


def _value_excl_self(z: Tensor, reads: Mapping[str, Tensor]) -> Update:
    v = _last(reads["v"], z.shape[1])
    n_kv = v.shape[-2]
    a_self = group_heads(self_weights(reads["pattern"]).unsqueeze(-1), n_kv)  # [b, q, kv, g, 1]
    v_ref = v.unsqueeze(-2)  # [b, q, kv, 1, d]
    return Update(group_heads(z, n_kv) - a_self * v_ref, v_ref)


_PRE = (("ref", "hook_resid_pre"),)
_V = ("v", "attn.hook_v")
SITES: dict[str, Site] = {
    s.name: s
    for s in [
        Site(
            "attn", "hook_attn_out", _PRE, False, _residual, "residual attention: attention output vs the block input"
        ),
        Site(
            "mlp",
            "hook_mlp_out",
            (("ref", "hook_resid_mid"),),
            False,
            _residual,
            "residual MLP: MLP output vs its residual input",
            parallel_block_reads=_PRE,
            post_ln_reads=(("ref", "ln1.hook_out"),),
        ),
        Site("block", "hook_resid_post", _PRE, False, _block, "residual block: resid_post - resid_pre vs resid_pre"),
        Site("value_full", "attn.hook_z", (_V,), True, _value_full, "value space, full aggregate o_t per head vs v_t"),
        Site(
            "value_excl_self",
            "attn.hook_z",
            (_V, ("pattern", "attn.hook_pattern")),
            True,
            _value_excl_self,
            "value space, exclude-self: c_t = o_t - A_tt v_t vs v_t",
        ),
        Site(
            "diag",
            "attn.hook_pattern",
            (),
            True,
            None,
            "attention diagonal: A_tt scaled by s_par (0 = removal), rows renormalised",
        ),
    ]
}

DECOMPOSITION_SITES: tuple[str, ...] = tuple(n for n, s in SITES.items() if s.is_decomposition)


def get_site(site: str | Site) -> Site:
    """The registered :class:`Site` called ``site`` (one name each: no aliases)."""
    if isinstance(site, Site):
        return site
    if str(site) not in SITES:
        raise UnknownSiteError(f"unknown site {site!r}; known sites: {sorted(SITES)}")
    return SITES[str(site)]
