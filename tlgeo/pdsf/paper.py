"""The PDSF paper's reference numbers (seed paper 001; instruction-tuned models of 7B-120B
parameters), in one place: ``tlgeo pdsf``, the atlas step and ``scripts/pdsf_table.py`` read them."""

from __future__ import annotations

__all__ = ["MODELS", "PAPER_DIVERGENCE", "PAPER_SINGLE_PASS_KL", "PAPER_GENERATION_PROMPTS", "PAPER_NEW_TOKENS",
           "PAPER_INTERFACE_DIM", "PAPER_K_D", "PAPER_TABLE", "divergence_text", "single_pass_text"]

MODELS = "instruction-tuned 7B-120B"
# persistent rotations during generation: (immediate divergence %, mean first divergence step) per condition
PAPER_DIVERGENCE: dict[str, tuple[float, float]] = {
    "D": (64.0, 1.17), "S": (28.2, 5.63), "F_top": (23.1, 6.52), "random": (4.5, float("nan"))}
PAPER_GENERATION_PROMPTS = 80  # SpecB prompts; below this a divergence rate is an indication only
PAPER_NEW_TOKENS = 64
# single-pass edits at the last prompt token: next-token KL (nats) per condition
PAPER_SINGLE_PASS_KL: dict[str, float] = {
    "F_transplant": 5.63, "F_mix": 2.85, "D_rotate": 0.052, "F_attenuate": 0.047, "S_rotate": 0.038}
PAPER_INTERFACE_DIM = "< 20"  # 1 + PR_D + PR_S
PAPER_K_D = "4-8"  # instruction-tuned; base models 2-18

_NAMES = {"D": "D", "S": "S", "F_top": "F-top", "random": "random", "F_transplant": "F-transplant", "F_mix": "F-mix",
          "D_rotate": "D-rotation", "F_attenuate": "F-attenuate", "S_rotate": "S-rotation"}


def divergence_text() -> str:
    """``immediate divergence D 64 %, S 28.2 %, ...; mean first divergence 1.17 / 5.63 / 6.52``."""
    d = PAPER_DIVERGENCE
    imm = ", ".join(f"{_NAMES[c]} {v[0]:g} %" for c, v in d.items())
    first = " / ".join(f"{v[1]:g}" for v in d.values() if v[1] == v[1])
    return f"immediate divergence {imm}; mean first divergence {first}"


def single_pass_text() -> str:
    """``F-transplant 5.63, F-mix 2.85, D-rotation 0.052, F-attenuate 0.047, S-rotation 0.038``."""
    return ", ".join(f"{_NAMES[c]} {v:g}" for c, v in PAPER_SINGLE_PASS_KL.items())


def _slash(values, fmt: str) -> str:
    return " / ".join("—" if v != v else format(v, fmt) for v in values)


_SP = ("F_transplant", "F_mix", "D_rotate", "F_attenuate", "S_rotate")
# the rows of scripts/pdsf_table.py: the paper's column
PAPER_TABLE: dict[str, str] = {
    "width d_model": "2,048–12,288 (7B–120B)",
    "k_D over layers": "4–8 (instruction-tuned; base 2–18)",
    "interface dimension 1 + PR_D + PR_S": PAPER_INTERFACE_DIM,
    "participation ratio inside F (median over layers)": "F grows with d_model",
    "energy share of P / F (median over layers)": "—",
    "angle of û to the top principal axis": "almost orthogonal",
    "curvature ratio D / S / F (median over layers)": "complexity falls from D (folded) to F (flat): the ratio rises",
    "silhouette D / S / F (median over layers)": "F anti-discriminative",
    "immediate divergence D / S / F-top / random": _slash((v[0] for v in PAPER_DIVERGENCE.values()), ".1f") + " %",
    "mean first divergence D / S / F-top / random": _slash((v[1] for v in PAPER_DIVERGENCE.values()), ".2f"),
    "ranks D / S / F-top / random at the edited state": "adaptive",
    "F-dynamic: immediate divergence, mean first divergence, rank": "—",
    "single pass, KL (nats): F-transplant / F-mix / D-rot / F-att / S-rot / random-rot":
        _slash([PAPER_SINGLE_PASS_KL[c] for c in _SP], "g") + " / —",
    "single pass: angle left at the last state, D-rot / S-rot / F-mix": "—",
    "static share of F during generation (range over layers)": "F splits into static and dynamic parts",
}
