"""Direction-aware Wanda: prune to minimise the perpendicular part of the output error.

Wanda removes weight ``W_ij`` of a linear layer when its score
``|W_ij| * ||X_j||`` is small: removing it changes the layer output of token ``t``
by ``-W_ij x_tj e_i`` (``e_i`` the i-th unit vector), whose squared L2 norm summed
over the calibration tokens is ``W_ij^2 sum_t x_tj^2``.

For a layer that writes a residual update (``o_proj``, ``down_proj``: its output
``y_t`` *is* ``Delta_base``), split that error relative to ``u_t = y_t / ||y_t||``:
its parallel part has energy ``W_ij^2 x_tj^2 u_ti^2`` and the perpendicular part
the rest. The direction-aware score weights the parallel energy by ``lambda``::

    score_ij^2 = W_ij^2 * sum_t x_tj^2 * (1 - (1 - lambda) * u_ti^2)

``lambda = 1`` is Wanda; ``lambda = 0`` minimises only the perpendicular error
(per weight, ignoring interactions, as Wanda does for L2). Other linear layers
(q/k/v, gate/up) keep Wanda's score. Everything else -- llmcompressor's sequential
calibration, the per-row comparison groups, N:M selection -- is Wanda's.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._lazy import lazy_classes
from .decompose import perp_wanda_score

__all__ = ["PerpWandaPruningModifier", "OUTPUT_LINEARS", "writes_residual"]  # noqa: F822 (a lazy class: ._lazy)

OUTPUT_LINEARS = ("o_proj", "down_proj", "dense", "dense_4h_to_h", "c_proj", "out_proj", "fc2")


def writes_residual(module_name: str, output_linears: tuple[str, ...] = OUTPUT_LINEARS) -> bool:
    """Whether the linear layer ``module_name`` (llmcompressor's names end with ".") writes a
    residual update: its last name component is one of ``output_linears``."""
    return module_name.rstrip(".").rsplit(".", 1)[-1] in output_linears


def _make_modifier_class():
    from llmcompressor.modifiers.pruning.wanda import WandaPruningModifier
    from llmcompressor.modifiers.pruning.wanda.wanda_sparsify import WANDA_PRECISION
    from pydantic import PrivateAttr

    class PerpWandaPruningModifier(WandaPruningModifier):
        """WandaPruningModifier whose score on residual-writing layers targets ``||e_perp||``."""

        perp_lambda: float = 0.0
        output_linears: tuple[str, ...] = OUTPUT_LINEARS
        _uu_xx: dict = PrivateAttr(default_factory=dict)

        def _is_output(self, module) -> bool:
            return writes_residual(self._module_names.get(module, ""), self.output_linears)

        def calibrate_module(self, module, args, _output):
            n_before = self._num_samples.get(module, 0)
            super().calibrate_module(module, args, _output)
            if not self._is_output(module):
                return
            x = args[0].to(WANDA_PRECISION)
            y = (_output[0] if isinstance(_output, tuple) else _output).to(WANDA_PRECISION)
            x, y = x.reshape(-1, x.shape[-1]), y.reshape(-1, y.shape[-1])
            u2 = (y / y.norm(dim=-1, keepdim=True).clamp_min(1e-12)) ** 2  # [T, out]
            m = u2.t() @ (x * x)  # [out, in]: sum_t u_ti^2 x_tj^2
            n_added = args[0].shape[0] if args[0].dim() == 3 else 1
            n_after = n_before + n_added
            prev = self._uu_xx.get(module)
            # the same running mean over samples as Wanda's row scalars
            self._uu_xx[module] = m / n_after if prev is None else prev * (n_before / n_after) + m / n_after

        def compress_modules(self):
            from compressed_tensors.utils import align_module_device, update_offload_parameter

            for module in list(self._num_samples.keys()):
                S = self._row_scalars.pop(module)
                M = self._uu_xx.pop(module, None)
                with torch.no_grad(), align_module_device(module):
                    W = module.weight.data.to(WANDA_PRECISION)
                    score = perp_wanda_score(W, S, M, self.perp_lambda)
                    mask = _mask_from_score(score, self._module_sparsities[module], self._prune_n, self._prune_m)
                    new = W.clone()
                    new[mask] = 0.0
                update_offload_parameter(module, "weight", new.to(module.weight.dtype))
                del self._num_samples[module]

        def on_finalize(self, state, **kwargs) -> bool:
            self._uu_xx = dict()
            return super().on_finalize(state, **kwargs)

    return PerpWandaPruningModifier


def _mask_from_score(score: Tensor, sparsity: float, prune_n: int, prune_m: int) -> Tensor:
    """Wanda's selection: the lowest-scoring ``prune_n`` of every ``prune_m`` columns per row,
    or the lowest ``sparsity`` fraction of each row (``prune_n == 0``). True = prune."""
    mask = torch.zeros_like(score, dtype=torch.bool)
    if prune_n:
        out, inp = score.shape
        g = score.reshape(out, inp // prune_m, prune_m)
        idx = torch.topk(g, prune_n, dim=-1, largest=False).indices
        mask.view(out, inp // prune_m, prune_m).scatter_(-1, idx, True)
    else:
        idx = torch.sort(score, dim=-1, stable=True).indices[:, : int(score.shape[1] * sparsity)]
        mask.scatter_(1, idx, True)
    return mask


__getattr__ = lazy_classes(globals(), PerpWandaPruningModifier=_make_modifier_class)
