"""What every section's claims share: the registry (:data:`CLAIMS`, :func:`claim`), the committed tables they read
(paths relative to the repository) and the helpers that pick a counterexample's rows."""

from __future__ import annotations

from pathlib import Path

from tlgeo.report.claims import Claims

ROOT = Path(__file__).resolve().parents[2]
CLAIMS = Claims()
claim = CLAIMS.claim

EDITS = "results/run-smollm2-135m/edits.csv"
PROFILE = "results/run-smollm2-135m/profile_summary.csv"
ZEROSHOT = "results/atlas-smollm2-135m/compare_zeroshot_paired.csv"
AUDIT = "results/atlas-smollm2-135m/audit.csv"
CARRIER = "results/atlas-smollm2-135m/mlp_carrier.csv"
DAMAGE = "results/dirmag-smollm2-135m/dirmag_damage.csv"
DAMAGE_SUMMARY = "results/dirmag-smollm2-135m/dirmag_damage_summary.csv"
DAMAGE_GEMMA = "results/dirmag-gemma3-270m/dirmag_damage.csv"
DAMAGE_SUMMARY_GEMMA = "results/dirmag-gemma3-270m/dirmag_damage_summary.csv"
PARTS = "results/dirmag-parts-smollm2-135m"
PAIR = {a: f"results/dirmag-norm-pair-{a}" for a in ("gpt", "llama")}  # the matched LayerNorm / RMSNorm pair
PAIR_LOGS = [f"results/norm-pair/{a}/log.csv" for a in ("gpt", "llama")]
TABLE12, COMPRESSED_PPL = "results/compression-smollm2-135m/table12.csv", "results/compression-smollm2-135m/ppl.csv"
BLIMP, REPAIR, ENTROPY, PROBES = (f"{PARTS}/dirmag_{t}.csv" for t in ("blimp", "repair", "entropy", "probes"))
PARTS_GEMMA = "results/dirmag-parts-gemma3-270m"
BLIMP_G, REPAIR_G, ENTROPY_G, PROBES_G = (
    f"{PARTS_GEMMA}/dirmag_{t}.csv" for t in ("blimp", "repair", "entropy", "probes")
)
TASKS = "results/patching-smollm2-135m/patching_tasks.csv"
EFFECTS = "results/patching-smollm2-135m/patching_effects.csv"
BASELINE = "results/patching-smollm2-135m/patching_par_baseline.csv"
RELATIONS = "results/geometries-smollm2-135m/geometries_relations.csv"
RELATIONS_GEMMA = "results/geometries-gemma3-270m/geometries_relations.csv"
GEO_TOKENS = "results/geometries-smollm2-135m/geometries_tokens.csv.gz"
PATHS = "results/paths-smollm2-135m/patching_paths.csv"
ZOO_EFFECTS = {m: f"results/zoo-induction-{m}/patching_effects.csv" for m in ("llama", "gpt")}
ZOO_PATHS = {m: f"results/zoo-induction-{m}/patching_paths.csv" for m in ("llama", "gpt")}
ZOO_TASKS = {m: f"results/zoo-induction-{m}/patching_tasks.csv" for m in ("llama", "gpt")}
PRED = {t: f"results/zoo-predecessor-llama/patching_{t}.csv" for t in ("tasks", "effects", "paths")}
PDSF = "results/pdsf-smollm2-135m"
PDSF_GEMMA = "results/pdsf-gemma3-270m"
GEMMA_SINGLE = f"{PDSF_GEMMA}/pdsf_single_pass_summary.csv"
GEMMA_GEN = f"{PDSF_GEMMA}/pdsf_generation_summary.csv"
PDSF_LAYERS = f"{PDSF}/pdsf_layers.csv"
PDSF_SINGLE = f"{PDSF}/pdsf_single_pass_summary.csv"
PDSF_SINGLE_ROWS = f"{PDSF}/pdsf_single_pass.csv.gz"
PDSF_GEN = f"{PDSF}/pdsf_generation_summary.csv"
PDSF_GEN_ROWS = f"{PDSF}/pdsf_generation.csv.gz"
TOKENWISE = "results/tokenwise-smollm2-135m"
TOKENWISE_GEMMA = "results/tokenwise-gemma3-270m"
TW_GEOMETRY = {m: f"{d}/tokenwise_geometry.csv" for m, d in (("smollm2", TOKENWISE), ("gemma", TOKENWISE_GEMMA))}
TW_CORRELATION = {m: f"{d}/tokenwise_correlation.csv" for m, d in (("smollm2", TOKENWISE), ("gemma", TOKENWISE_GEMMA))}


def _near(x: float, quoted: float, decimals: int) -> bool:
    return round(float(x), decimals) == quoted


# -- which rows a counterexample edits ----------------------------------------------------------------------


def _head(
    layer: int, head: int, seed: "int | None" = None, component: str = "head", direction: str = "denoise"
) -> dict:
    """One head's exact patching rows (of one prompt sample, if ``seed``)."""
    w = {"method": "exact", "direction": direction, "component": component, "layer": layer, "head": head}
    return w if seed is None else {**w, "seed": seed}


def _rel(a: str, b: str, layer: int):
    """The relation rows of quantities ``a`` and ``b`` (either order) at ``layer``."""
    return lambda r: (((r["a"] == a) & (r["b"] == b)) | ((r["a"] == b) & (r["b"] == a))) & (r["layer"] == layer)


def _path(sender: tuple[int, int], receiver: tuple[int, int], inp: str, direction: "str | None" = None) -> dict:
    """One path's rows: the whole sender head into ``inp`` of the receiver head."""
    w = {
        "component": "head",
        "sender_layer": sender[0],
        "sender_head": sender[1],
        "receiver_layer": receiver[0],
        "receiver_head": receiver[1],
        "receiver_input": inp,
    }
    return w if direction is None else {**w, "direction": direction}


ZOO_CIRCUITS = ("induction-llama", "predecessor-llama", "induction-gpt", "lookback-llama")
CIRCUIT = {
    m: {t: f"results/circuits-zoo/{m}/circuit_{t}" for t in ("summary.csv", "edges.csv.gz")} for m in ZOO_CIRCUITS
}
TRACR = "results/circuits-tracr/recovery.csv"
IOI_CIRCUIT = {t: f"results/circuits-smollm2-135m/circuit_{t}" for t in ("summary.csv", "edges.csv.gz", "verify.csv")}
IOI_CURVE = "results/circuits-smollm2-135m/circuit_faithfulness.csv"
