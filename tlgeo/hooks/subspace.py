"""Edits of the residual stream inside a subspace, as TransformerLens hooks at ``blocks.L.hook_resid_post``.

A :class:`SubspaceEdit` holds *what* to do to each row of a batch (a basis per row
``[b, d, k]``, and a rotation ``[b, k, k]``, an attenuation factor or replacement
coordinates); :meth:`SubspaceEdit.hooks` says *where*: block ``layer``'s output,
at the last position of every forward (``positions="last"``: with the KV cache of
a generation loop that is the prompt's last token in the prefill, then each new
token) or at every position from ``start`` on (``positions="from"``: the same edit
in a loop that recomputes the whole sequence). The coordinates are those of the
state with its own prediction direction ``u`` projected out, so P is never moved.
The identity rotation (or factor 1) returns the tensor unchanged.

A :class:`ComplementEdit` acts on what lies outside several subspaces (F, outside
``u``, D and S): scale it, transplant another prompt's, or mix its coordinates
(:func:`tlgeo.geometry.rotation.edit_complement`), at the same places.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Sequence

import torch
from torch import Tensor

from ..errors import InputError
from ..geometry.rotation import edit_complement
from .adapter import HookList

__all__ = ["SubspaceEdit", "ComplementEdit", "subspace_edit"]


class _ResidualEdit:
    """Where an edit of ``blocks.{layer}.hook_resid_post`` acts: ``positions`` ``last`` or ``from`` ``start``;
    subclasses say what it does (:meth:`delta` of the states at those positions)."""

    layer: int
    positions: str
    start: int

    def rows(self) -> int:
        raise NotImplementedError

    def delta(self, h: Tensor) -> Tensor:
        raise NotImplementedError

    def _check_positions(self) -> None:
        if self.positions not in ("last", "from"):
            raise InputError(f"positions must be 'last' or 'from', got {self.positions!r}")

    def hooks(self, model=None) -> HookList:
        """``[(blocks.{layer}.hook_resid_post, fn)]`` for ``run_with_hooks`` / ``model.hooks``."""
        if model is not None and not 0 <= self.layer < model.cfg.n_layers:
            raise InputError(f"layer {self.layer} out of range: the model has blocks 0..{model.cfg.n_layers - 1}")

        def fn(h: Tensor, hook) -> Tensor:
            if h.shape[0] != self.rows():
                raise InputError(f"the edit holds {self.rows()} rows, the batch has {h.shape[0]}")
            h = h.clone()
            if self.positions == "last":
                h[:, -1] = h[:, -1] + self.delta(h[:, -1]).to(h.dtype)
            else:
                h[:, self.start :] = h[:, self.start :] + self.delta(h[:, self.start :]).to(h.dtype)
            return h

        return [(f"blocks.{self.layer}.hook_resid_post", fn)]


@dataclass
class SubspaceEdit(_ResidualEdit):
    """Rotate (``rotation [b, k, k]``), scale (``factor``) or replace (``target [b, k]`` coordinates,
    ``weight``) the coordinates of each row's state inside ``basis [b, d, k]`` at ``blocks.{layer}``."""

    layer: int
    basis: Tensor
    u: Tensor | None = None
    rotation: Tensor | None = None
    factor: float | None = None
    target: Tensor | None = None
    weight: float = 1.0
    positions: str = "last"
    start: int = 0

    def __post_init__(self) -> None:
        given = [x is not None for x in (self.rotation, self.factor, self.target)]
        if sum(given) != 1:
            raise InputError("give exactly one of rotation, factor or target")
        if self.basis.ndim != 3:
            raise InputError(f"basis must be [batch, d, k], got shape {tuple(self.basis.shape)}")
        b, _, k = self.basis.shape
        if self.rotation is not None and self.rotation.shape != (b, k, k):
            raise InputError(f"rotation must be [{b}, {k}, {k}], got {tuple(self.rotation.shape)}")
        if self.target is not None and self.target.shape != (b, k):
            raise InputError(f"target must be [{b}, {k}], got {tuple(self.target.shape)}")
        self._check_positions()

    def rows(self) -> int:
        return self.basis.shape[0]

    @classmethod
    def stack(cls, edits: "Sequence[SubspaceEdit | None]", rows: int) -> "SubspaceEdit":
        """One rotation edit of ``len(edits) x rows`` rows: ``edits[i]``'s ``rows`` rows one block after the other
        (``None``: a block left alone), each row changed as its own edit changes it. Bases are zero-padded to the
        widest, rotations made block-diagonal with the identity, and ``u`` is zero where an edit has none: the padded
        coordinates are exact zeros, so only the order of a few float sums differs. Every edit rotates, at the same
        layer and positions."""
        given = [e for e in edits if e is not None]
        if not given:
            raise InputError("nothing to stack: every edit is None")
        first = given[0]
        for e in given:
            if not isinstance(e, SubspaceEdit) or e.rotation is None:
                raise InputError(f"only rotations stack, got {type(e).__name__} without one")
            if (e.layer, e.positions, e.start) != (first.layer, first.positions, first.start):
                raise InputError("stacked edits must act at one layer and the same positions")
            if e.rows() != rows:
                raise InputError(f"an edit holds {e.rows()} rows, each block has {rows}")
        d, k = first.basis.shape[1], max(e.basis.shape[2] for e in given)
        dt = torch.promote_types(first.basis.dtype, first.rotation.dtype)
        basis = torch.zeros(len(edits) * rows, d, k, dtype=dt)
        rot = torch.eye(k, dtype=dt).repeat(len(edits) * rows, 1, 1)
        u = torch.zeros(len(edits) * rows, d, dtype=dt)
        for i, e in enumerate(edits):
            if e is None:
                continue
            block, ki = slice(i * rows, (i + 1) * rows), e.basis.shape[2]
            basis[block, :, :ki] = e.basis.to(dt).cpu()
            rot[block, :ki, :ki] = e.rotation.to(dt).cpu()
            if e.u is not None:
                u[block] = e.u.to(dt).cpu()
        return cls(first.layer, basis, u=u, rotation=rot, positions=first.positions, start=first.start)

    def delta(self, h: Tensor) -> Tensor:
        """The change of states ``h [b, ..., d]`` (float32/64, zero for a no-op edit)."""
        dt = torch.float64 if h.dtype == torch.float64 else torch.float32
        x = h.to(dt)
        b_ = self.basis.to(device=h.device, dtype=dt)
        view = (slice(None),) + (None,) * (x.ndim - 2)
        if self.u is not None:
            u = self.u.to(device=h.device, dtype=dt)[view]
            x = x - (x * u).sum(-1, keepdim=True) * u
        c = torch.einsum("b...d,bdk->b...k", x, b_)
        if self.rotation is not None:
            new = torch.einsum("b...k,bkj->b...j", c, self.rotation.to(device=h.device, dtype=dt))
        elif self.factor is not None:
            new = c * self.factor
        else:
            new = c + self.weight * (self.target.to(device=h.device, dtype=dt)[view] - c)
        return torch.einsum("b...k,bdk->b...d", new - c, b_)


@dataclass
class ComplementEdit(_ResidualEdit):
    """Scale (``factor``), transplant (``donor [b, d]``) or mix (``mix = (perm [b, d], signs [b, d])``) the
    part of each row's state outside ``bases`` (each ``[b, d, k_i]``; the prediction direction as a
    ``[b, d, 1]`` basis) at ``blocks.{layer}``; ``project``: keep a donor or mixed vector inside the
    complement (exact), or not (the authors')."""

    layer: int
    bases: tuple[Tensor, ...]
    factor: float | None = None
    donor: Tensor | None = None
    mix: tuple[Tensor, Tensor] | None = None
    project: bool = True
    positions: str = "last"
    start: int = 0

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.factor, self.donor, self.mix)) != 1:
            raise InputError("give exactly one of factor, donor or mix")
        if not self.bases or any(b.ndim != 3 or b.shape[:2] != self.bases[0].shape[:2] for b in self.bases):
            raise InputError("bases must be one or more [batch, d, k] tensors of the same batch and width")
        b, d = self.bases[0].shape[:2]
        if self.donor is not None and self.donor.shape != (b, d):
            raise InputError(f"donor must be [{b}, {d}], got {tuple(self.donor.shape)}")
        if self.mix is not None and any(m.shape != (b, d) for m in self.mix):
            raise InputError(f"mix must be (perm, signs), each [{b}, {d}]")
        self._check_positions()

    def rows(self) -> int:
        return self.bases[0].shape[0]

    def delta(self, h: Tensor) -> Tensor:
        """The change of states ``h [b, ..., d]`` (float32/64, zero for ``factor = 1``)."""
        dt = torch.float64 if h.dtype == torch.float64 else torch.float32
        bases = [b.to(device=h.device, dtype=dt) for b in self.bases]
        return edit_complement(
            h.to(dt),
            bases,
            factor=self.factor,
            donor=None if self.donor is None else self.donor.to(h.device),
            mix=self.mix,
            project=self.project,
        )


@contextmanager
def subspace_edit(model, edit: SubspaceEdit | ComplementEdit) -> Iterator[None]:
    """Attach ``edit`` for the duration of the block (removed on exit, also after an exception)."""
    with model.hooks(fwd_hooks=edit.hooks(model)):
        yield
