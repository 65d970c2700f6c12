"""Pretraining's column of the support matrix. Training is no :class:`~tlgeo.runner.analysis.Analysis` (a run
trains a model; it returns no result tables), so its column is registered here, as a record's ``support`` is,
when :func:`tlgeo.report.registry.load_analyses` imports every package's ``analysis`` module."""

from __future__ import annotations

from ..families import Family, Support, register_support

__all__ = ["support"]


def support(family: Family) -> Support:
    """Pretraining on ``family``: its own GPT and Llama models, whatever the family."""
    return Support(
        "differs",
        "pretraining builds its own GPT (LayerNorm) and Llama (RMSNorm) models; "
        "suppression hooks follow the sites' support",
    )


register_support("train", support)
