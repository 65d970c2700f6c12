"""SparseGPT with a perpendicular-aware refit of the residual-writing layers.

llmcompressor's ``SparseGPTModifier`` chooses the mask and reconstructs every
layer in its sequential pipeline. For the layers that write the residual update
(``o_proj``, ``down_proj``; their output is the update ``Delta_base``) this
subclass then refits the kept weights with :func:`tlgeo.compression.reconstruct.perp_refit`
-- same mask, same calibration inputs, loss ``||e_perp||^2 + lam ||e_par||^2`` relative
to the dense output direction of each token, started from SparseGPT's solution,
never with an isotropic error above ``(1 + max_iso_increase)`` times that of the
unreconstructed mask. Per-layer energies are kept in :attr:`refit_log`.
"""

from __future__ import annotations

import torch

from ._lazy import lazy_classes
from .perp_wanda import OUTPUT_LINEARS, writes_residual
from .reconstruct import perp_refit

__all__ = ["PerpSparseGPTModifier"]  # noqa: F822 (a lazy class: ._lazy)


def _make_modifier_class():
    from llmcompressor.modifiers.pruning.sparsegpt import SparseGPTModifier
    from pydantic import PrivateAttr

    class PerpSparseGPTModifier(SparseGPTModifier):
        """SparseGPTModifier whose residual-writing layers are refit for ``||e_perp||``."""

        perp_lambda: float = 0.0
        refit_iters: int = 12
        max_iso_increase: float = 0.0
        output_linears: tuple[str, ...] = OUTPUT_LINEARS
        _xy: dict = PrivateAttr(default_factory=dict)
        _refit_log: list = PrivateAttr(default_factory=list)

        @property
        def refit_log(self) -> list[dict]:
            return list(self._refit_log)

        def _is_output(self, module) -> bool:
            return writes_residual(self._module_names.get(module, ""), self.output_linears)

        def calibrate_module(self, module, args, _output):
            super().calibrate_module(module, args, _output)
            if self._is_output(module):
                y = _output[0] if isinstance(_output, tuple) else _output
                x = args[0].detach().reshape(-1, args[0].shape[-1]).float().cpu()
                y = y.detach().reshape(-1, y.shape[-1]).float().cpu()
                self._xy.setdefault(module, []).append((x, y))

        def compress_modules(self):
            from compressed_tensors.utils import align_module_device, update_offload_parameter

            pending = [m for m in self._num_samples if m in self._xy]
            dense = {m: m.weight.detach().float().cpu().clone() for m in pending}
            super().compress_modules()  # SparseGPT: mask + isotropic reconstruction of every layer
            for module in pending:
                parts = self._xy.pop(module)
                X, Y = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
                with torch.no_grad(), align_module_device(module):
                    sgpt = module.weight.detach().float().cpu()
                    res = perp_refit(
                        dense[module],
                        sgpt != 0,
                        X,
                        Y,
                        lam=self.perp_lambda,
                        damp=self.dampening_frac or 0.0,
                        start=sgpt,
                        iters=self.refit_iters,
                        max_iso_increase=self.max_iso_increase,
                    )
                    new = res.weight.to(module.weight.device, module.weight.dtype)
                update_offload_parameter(module, "weight", new)
                self._refit_log.append(
                    {"module": self._module_names[module].rstrip("."), "tokens": int(X.shape[0]), **res.to_dict()}
                )

        def on_finalize(self, state, **kwargs) -> bool:
            self._xy = dict()
            return super().on_finalize(state, **kwargs)

    return PerpSparseGPTModifier


__getattr__ = lazy_classes(globals(), PerpSparseGPTModifier=_make_modifier_class)
