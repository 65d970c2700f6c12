"""What can be patched: the components of a head's or an MLP's write, one registry.

| component      | scope | patched hook        | what is copied from the source run                         |
|----------------|-------|---------------------|------------------------------------------------------------|
| ``head``       | head  | ``attn.hook_z``     | the head's whole output ``z_t``                             |
| ``head_par``   | head  | ``hook_attn_out``   | of its write ``z_t W_O``: the part along ``resid_pre``      |
| ``head_perp``  | head  | ``hook_attn_out``   | of its write: the part orthogonal to ``resid_pre``          |
| ``self``       | head  | ``attn.hook_z``     | the self message ``A_tt v_t``                               |
| ``nonself``    | head  | ``attn.hook_z``     | the non-self aggregate ``c_t = z_t - A_tt v_t``             |
| ``nonself_par``| head  | ``attn.hook_z``     | of ``c_t``: the part along ``v_t``                          |
| ``nonself_perp``| head | ``attn.hook_z``     | of ``c_t``: the part orthogonal to ``v_t``                  |
| ``mlp``        | layer | ``hook_mlp_out``    | the MLP output                                             |
| ``mlp_par``    | layer | ``hook_mlp_out``    | its part along ``resid_mid`` (``resid_pre`` in parallel blocks, ``ln1.hook_out`` post-LN) |
| ``mlp_perp``   | layer | ``hook_mlp_out``    | its part orthogonal to it                                   |

The references are those of the decomposition sites ``attn``, ``mlp`` and
``value_excl_self``. A part is the part of the *difference* ``source - target`` (see
:mod:`tlgeo.geometry.patch_parts`), taken against the **patched run's** reference by default
(``frame="patched"``): after a ``head_par`` patch the head's write has the source's
component along the state it is written into, and its component orthogonal to that state
is the patched run's own. ``frame="source"`` projects on the source run's reference instead.
Either way ``par + perp`` is exactly the whole patch, and ``self + nonself_par +
nonself_perp`` exactly the ``head`` patch.

A component's :meth:`Component.delta` is the change added to the patched hook's tensor, for
rows that each patch the heads marked in ``heads [rows, n_heads]`` at the positions marked
in ``pos [rows, q]``.
"""  # noqa: E501

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from jaxtyping import Float
from torch import Tensor

from ..errors import InputError
from ..geometry.patch_parts import head_writes, project_part, value_parts
from ..hooks.sites import Site

__all__ = [
    "Component",
    "COMPONENTS",
    "HEAD_COMPONENTS",
    "LAYER_COMPONENTS",
    "FRAMES",
    "get_component",
    "head_write_part",
]

FRAMES = ("patched", "source")

_Z = Site("patch_z", "attn.hook_z", (), True, None, "a head's output z (patched in place)")
_VALUE = Site(
    "patch_value",
    "attn.hook_z",
    (("v", "attn.hook_v"), ("pattern", "attn.hook_pattern")),
    True,
    None,
    "a head's output z split in value space (self message, non-self aggregate along v_t)",
)
_WRITE = Site(
    "patch_write",
    "hook_attn_out",
    (("ref", "hook_resid_pre"), ("z", "attn.hook_z")),
    False,
    None,
    "a head's residual write z W_O split along resid_pre (added to the attention output)",
)
_MLP = Site(
    "patch_mlp",
    "hook_mlp_out",
    (("ref", "hook_resid_mid"),),
    False,
    None,
    "the MLP output split along its residual input",
    parallel_block_reads=(("ref", "hook_resid_pre"),),
    post_ln_reads=(("ref", "ln1.hook_out"),),
)

Acts = Mapping[str, Tensor]  # role -> tensor; "target" is the patched hook's own tensor


@dataclass(frozen=True)
class Component:
    """One patchable part: ``scope`` ``head`` (per attention head) or ``layer``, the site it is
    patched at (target hook and reads), and which ``part`` of which quantity it copies."""

    name: str
    scope: str
    site: Site
    quantity: str  # z, self, nonself, write, mlp
    part: str  # whole, par, perp
    description: str

    def __repr__(self) -> str:
        return f"Component({self.name!r})"

    def delta(
        self,
        target: Acts,
        source: Acts,
        *,
        heads: Tensor | None,
        pos: Tensor | None,
        frame: str = "patched",
        W_O: Tensor | None = None,
    ) -> Tensor:
        """The change to add to ``target["target"]`` (same shape, compute dtype).

        ``target`` / ``source``: the site's tensors by role in the patched and the source run,
        same rows; ``heads``: ``[rows, n_heads]`` 0/1 (``None``: every head); ``pos``:
        ``[rows, q]`` 0/1 (``None``: every position); ``W_O``: ``[n_heads, d_head, d_model]``
        (for ``head_par`` / ``head_perp``)."""
        if frame not in FRAMES:
            raise InputError(f"unknown frame {frame!r}; choose from {FRAMES}")
        own = target if frame == "patched" else source
        if self.quantity == "mlp":
            d = project_part(source["target"].to(target["target"].device) - target["target"], own["ref"], self.part)
            return d if pos is None else d * pos.to(d)[..., None]
        if self.quantity == "write":
            dz = _masked(source["z"].to(target["z"].device) - target["z"], heads, pos)
            d = head_writes(dz, W_O.to(dz.device)).sum(-2)  # [rows, q, d_model]: the masked heads' change of write
            return project_part(d, own["ref"].to(d.device), self.part)
        if self.quantity == "z":
            return _masked(source["target"].to(target["target"].device) - target["target"], heads, pos)
        s = value_parts(source["target"], source["v"], source["pattern"])
        t = value_parts(target["target"], target["v"], target["pattern"])
        s = [x.to(t.v.device) for x in s]
        if self.quantity == "self":
            d = s[0] - t.self_msg
        else:
            ref = t.v if frame == "patched" else s[2]
            d = project_part(s[1] - t.nonself, ref, self.part)
        return _masked(d, heads, pos)

    def head_deltas(
        self, target: Acts, source: Acts, *, pos: Tensor | None, frame: str = "patched", W_O: Tensor | None = None
    ) -> Tensor:
        """Each head's own change, ``[rows, q, n_heads, ...]``: ``delta`` with only head ``h`` patched is
        this tensor's head ``h`` (in z space, or as a write into the residual for ``head_par`` /
        ``head_perp``), all heads in one call."""
        if self.scope != "head":
            raise InputError(f"{self.name!r} is one per block: it has no per-head changes")
        if self.quantity != "write":
            return self.delta(target, source, heads=None, pos=pos, frame=frame)
        own = target if frame == "patched" else source
        dz = _masked(source["z"].to(target["z"].device) - target["z"], None, pos)
        return head_write_part(dz, own["ref"], W_O, self.part)


def head_write_part(
    z: Float[Tensor, "rows q head d_head"], ref: Float[Tensor, "rows q d_model"], W_O: Tensor, part: str
) -> Float[Tensor, "rows q head d_model"]:
    """``part`` (whole, par, perp) of each head's residual write ``z^h W_O^h`` relative to ``ref``, the
    residual it is written into (the ``ref`` read of ``head_par`` / ``head_perp``), in the compute dtype
    (``W_O``: ``[n_heads, d_head, d_model]``)."""
    return project_part(head_writes(z, W_O.to(z.device)), ref.to(z.device).unsqueeze(-2), part)


def _masked(d: Float[Tensor, "rows q head d"], heads: Tensor | None, pos: Tensor | None) -> Tensor:
    if heads is not None:
        d = d * heads.to(d)[:, None, :, None]
    if pos is not None:
        d = d * pos.to(d)[:, :, None, None]
    return d


COMPONENTS: dict[str, Component] = {
    c.name: c
    for c in [
        Component("head", "head", _Z, "z", "whole", "the head's whole output z_t"),
        Component("head_par", "head", _WRITE, "write", "par", "the part of the head's write along resid_pre"),
        Component("head_perp", "head", _WRITE, "write", "perp", "the part of the head's write orthogonal to resid_pre"),
        Component("self", "head", _VALUE, "self", "whole", "the self message A_tt v_t"),
        Component("nonself", "head", _VALUE, "nonself", "whole", "the non-self aggregate c_t = z_t - A_tt v_t"),
        Component("nonself_par", "head", _VALUE, "nonself", "par", "the part of c_t along v_t"),
        Component("nonself_perp", "head", _VALUE, "nonself", "perp", "the part of c_t orthogonal to v_t"),
        Component("mlp", "layer", _MLP, "mlp", "whole", "the MLP output"),
        Component("mlp_par", "layer", _MLP, "mlp", "par", "the part of the MLP output along its residual input"),
        Component("mlp_perp", "layer", _MLP, "mlp", "perp", "the part of the MLP output orthogonal to its input"),
    ]
}
HEAD_COMPONENTS = tuple(n for n, c in COMPONENTS.items() if c.scope == "head")
LAYER_COMPONENTS = tuple(n for n, c in COMPONENTS.items() if c.scope == "layer")


def get_component(name: str | Component) -> Component:
    """The registered :class:`Component` called ``name``."""
    if isinstance(name, Component):
        return name
    if name not in COMPONENTS:
        raise InputError(f"unknown component {name!r}; choose from {tuple(COMPONENTS)}")
    return COMPONENTS[name]
