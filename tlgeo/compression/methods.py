"""Compression method names: one grammar, parsed into a :class:`MethodSpec`.

A name is a family followed by ``_``-separated options::

    awq | rtn | wanda | sgpt | owl | perpalloc   [_perp] [_l<lambda>] [_w<bits>g<group>] [_s<percent>] [_<N>_<M>]

============  =====================================================================
family        what llmcompressor runs
============  =====================================================================
``awq``       ``AWQModifier`` + ``QuantizationModifier`` (``_perp``: the scale search
              scored by ``||e_perp||^2 + lam ||e_par||^2``, :mod:`.perp_awq`)
``rtn``       ``QuantizationModifier`` alone (round to nearest, min-max)
``wanda``     ``WandaPruningModifier`` (``_perp``: the per-weight perpendicular score,
              :mod:`.perp_wanda`)
``sgpt``      ``SparseGPTModifier`` (``_perp``: the residual-writing layers refit for the
              perpendicular error at SparseGPT's mask, :mod:`.perp_sparsegpt`)
``owl``       Wanda with OWL-style per-layer sparsities (:mod:`.allocation`)
``perpalloc`` Wanda with per-layer sparsities from the measured perpendicular error
============  =====================================================================

Defaults: 4-bit weights in groups of 64 (asymmetric, W4A16), 50 % sparsity,
unstructured, ``lam = 0`` (``lam = 1``: the isotropic objective; ``lam > 1`` weights the
parallel error more, a control). Examples: ``awq``, ``awq_perp_l0.25``, ``rtn_w3g64``,
``wanda_s70``, ``wanda_2_4``, ``sgpt_perp_2_4``, ``owl_s60``, ``perpalloc``.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from ..errors import UnknownNameError

__all__ = ["FAMILIES", "MethodSpec", "UnknownMethodError", "parse_method"]

FAMILIES = ("awq", "rtn", "wanda", "sgpt", "owl", "perpalloc")
QUANT_FAMILIES = ("awq", "rtn")


class UnknownMethodError(UnknownNameError, ValueError):
    """A compression method name that does not follow the grammar of :mod:`.methods`."""


@dataclass(frozen=True)
class MethodSpec:
    name: str
    family: str
    perp: bool = False
    lam: float = 0.0  # weight of the parallel error in a direction-aware objective (1 = isotropic)
    bits: int | None = None
    group_size: int | None = None
    sparsity: float = 0.0
    mask_structure: str = "0:0"

    @property
    def quantizes(self) -> bool:
        return self.family in QUANT_FAMILIES

    @property
    def kind(self) -> str:
        """The manifest's ``kind`` (``awq``, ``rtn``, ``wanda``, ``wanda_perp``, ``sgpt_perp``, ...)."""
        return f"{self.family}_perp" if self.perp else self.family

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def canonical(self) -> str:
        """The name without default options (``wanda_s50`` and ``wanda`` are one model)."""
        parts = [self.family] + (["perp"] if self.perp else [])
        if self.perp and self.lam:
            parts.append(f"l{self.lam:g}")
        if self.quantizes:
            if (self.bits, self.group_size) != (4, 64):
                parts.append(f"w{self.bits}g{self.group_size}")
        elif self.mask_structure != "0:0":
            parts.append(self.mask_structure.replace(":", "_"))
        elif abs(self.sparsity - 0.5) > 1e-9:
            parts.append(f"s{100 * self.sparsity:g}")
        return "_".join(parts)


_OPT = re.compile(r"^(?:(perp)|l(\d*\.?\d+)|w(\d+)g(\d+)|s(\d+(?:\.\d+)?)|(\d+)_(\d+))$")


def parse_method(name: str, group_size: int = 64, lam: float | None = None) -> MethodSpec:
    """The :class:`MethodSpec` of ``name``; ``group_size`` / ``lam``: defaults where the
    name does not say. Raises :class:`UnknownMethodError` naming the bad part."""
    family, _, rest = str(name).partition("_")
    if family not in FAMILIES:
        raise UnknownMethodError(f"unknown compression method {name!r}: family {family!r} is not one of {FAMILIES}")
    # options are "_"-separated, but N:M is written "N_M": join digit pairs first
    parts = re.findall(r"\d+_\d+|[^_]+", rest) if rest else []
    lam_named = False
    opts: dict = {"perp": False, "lam": lam, "bits": None, "group_size": None, "sparsity": None, "mask": "0:0"}
    for p in parts:
        m = _OPT.match(p)
        if not m:
            raise UnknownMethodError(
                f"unknown option {p!r} in compression method {name!r} (grammar: tlgeo.compression.methods)"
            )
        perp, lm, bits, gs, sp, n, mm = m.groups()
        if perp:
            opts["perp"] = True
        elif lm is not None:
            opts["lam"], lam_named = float(lm), True
        elif bits is not None:
            opts["bits"], opts["group_size"] = int(bits), int(gs)
        elif sp is not None:
            opts["sparsity"] = float(sp) / 100
        else:
            n, mm = int(n), int(mm)
            if not 0 < n < mm:
                raise UnknownMethodError(f"N:M pattern {n}:{mm} in {name!r} needs 0 < N < M")
            opts["mask"] = f"{n}:{mm}"
    quant = family in QUANT_FAMILIES
    if quant and (opts["sparsity"] is not None or opts["mask"] != "0:0"):
        raise UnknownMethodError(f"{name!r}: a quantisation method takes no sparsity or N:M option")
    if not quant and opts["bits"] is not None:
        raise UnknownMethodError(f"{name!r}: a pruning method takes no w<bits>g<group> option")
    if opts["perp"] and family not in ("awq", "wanda", "sgpt"):
        raise UnknownMethodError(
            f"{name!r}: '_perp' applies to awq, wanda and sgpt ({family!r} is direction-aware "
            "or isotropic by construction)"
        )
    if lam_named and not opts["perp"]:
        raise UnknownMethodError(f"{name!r}: a lambda option needs '_perp'")
    lam_v = 0.0 if opts["lam"] is None or not opts["perp"] else opts["lam"]
    if not 0.0 <= lam_v <= 100.0:
        raise UnknownMethodError(f"{name!r}: lambda must be in [0, 100], got {lam_v}")
    if family in ("owl", "perpalloc") and opts["mask"] != "0:0":
        raise UnknownMethodError(f"{name!r}: per-layer allocation is for unstructured sparsity only")
    if quant:
        bits = opts["bits"] or 4
        if bits not in (2, 3, 4, 8):
            raise UnknownMethodError(f"{name!r}: {bits}-bit weights are not supported (2, 3, 4 or 8)")
        return MethodSpec(str(name), family, opts["perp"], lam_v, bits, opts["group_size"] or group_size)
    if opts["mask"] != "0:0":
        n, mm = (int(x) for x in opts["mask"].split(":"))
        sparsity = n / mm
        if opts["sparsity"] is not None and abs(opts["sparsity"] - sparsity) > 1e-9:
            raise UnknownMethodError(f"{name!r}: sparsity {opts['sparsity']} contradicts the {n}:{mm} pattern")
    else:
        sparsity = 0.5 if opts["sparsity"] is None else opts["sparsity"]
    if not 0.0 < sparsity < 1.0:
        raise UnknownMethodError(f"{name!r}: sparsity must be in (0, 100) %, got {100 * sparsity:g} %")
    return MethodSpec(str(name), family, opts["perp"], lam_v, sparsity=sparsity, mask_structure=opts["mask"])
