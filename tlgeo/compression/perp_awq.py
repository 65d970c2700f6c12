"""Direction-aware AWQ: the per-channel scale search scored by the perpendicular error.

llmcompressor's ``AWQModifier`` grid-searches, for each smoothing mapping, the
scales ``s`` minimising the mean squared error between the dense output of the
mapping's parent module and its output with ``Q(W s) s^-1``. In a Llama / Gemma
block every parent (attention, its ``o_proj``, the MLP, its ``down_proj``) outputs a
residual update, so the error can be split relative to the dense update of each
token. This subclass scores the search with
:func:`tlgeo.compression.decompose.mixed_error_energy`,
``||e_perp||^2 + lam ||e_par||^2`` (``lam = 1``: AWQ's own loss); everything else --
the grid, duo scaling, the quantisation -- is AWQ's.
"""

from __future__ import annotations

import torch

from ._lazy import lazy_classes
from .decompose import mixed_error_energy

__all__ = ["PerpAWQModifier"]  # noqa: F822 (a lazy class: ._lazy)


def _make_modifier_class():
    from llmcompressor.core import active_session
    from llmcompressor.modifiers.transform.awq import AWQModifier

    class PerpAWQModifier(AWQModifier):
        """AWQModifier whose scale search minimises ``||e_perp||^2 + lam ||e_par||^2``."""

        perp_lambda: float = 0.0

        @torch.no_grad()
        def _compute_loss(self, fp16_outputs, int_w_outputs) -> float:
            state = active_session().state
            masks = state.loss_masks if state else None
            total, count = 0.0, 0
            for i, (ref, out) in enumerate(zip(fp16_outputs, int_w_outputs)):
                out = out.to(ref.device)
                if masks:
                    keep = masks[i].to(ref.device) == 1
                    ref, out = ref[keep], out[keep]
                s, n = mixed_error_energy(ref, out, self.perp_lambda)
                total, count = total + float(s), count + n
            return total / max(count, 1)

    return PerpAWQModifier


__getattr__ = lazy_classes(globals(), PerpAWQModifier=_make_modifier_class)
