"""``tlgeo atlas``: one model, every registered analysis step, one HTML report + CSVs.

Each analysis family contributes its steps (:mod:`tlgeo.report.registry`
lists the contributing modules; :mod:`tlgeo.pipeline` is the contract). Every
step writes its CSVs into the output directory as soon as it is done; a rerun
loads finished steps and resumes unfinished ones from their JSON-lines logs.
``python -c "import tlgeo.report.atlas as a; print(a.STEPS)"`` lists the steps;
:mod:`tlgeo.decomposition.atlas` describes the directional-decomposition ones.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..data import load_text
from ..models import load_model
from ..pipeline import StepContext, make_budgets
from .html import Report
from .registry import load_steps

__all__ = ["AtlasConfig", "STEPS", "run_atlas"]

STEPS: tuple[str, ...] = tuple(load_steps())


@dataclass
class AtlasConfig:
    """One atlas run: the model, the text, which steps, and the steps' budgets.

    ``budgets`` overrides budget fields by name (each analysis family declares
    its own in a dataclass, e.g. :class:`tlgeo.decomposition.atlas.DecompositionBudgets`;
    ``tlgeo atlas --help`` lists them all); unknown names are an error.
    ``steps=None`` runs every registered step.
    """

    model: str = "smollm2-135m"
    corpus: str = "wikitext2"
    out: Path | None = None
    steps: tuple[str, ...] | None = None
    seed: int = 0
    budgets: dict[str, Any] = field(default_factory=dict)

    def out_dir(self) -> Path:
        return Path(self.out or Path("results") / f"atlas-{self.model.replace('/', '_').replace(':', '-')}")

    def family_budgets(self) -> dict[str, Any]:
        """One budgets instance per family, with ``budgets`` applied."""
        return make_budgets(self.budgets)


def run_atlas(cfg: AtlasConfig, model=None) -> Path:
    """Run the chosen steps and write ``report.html`` + CSVs into ``cfg.out_dir()``."""
    registered = load_steps()
    chosen = list(registered) if cfg.steps is None else list(cfg.steps)
    unknown = [s for s in chosen if s not in registered]
    if unknown:
        raise ValueError(f"unknown atlas step(s) {unknown}; steps: {list(registered)}")
    budgets = cfg.family_budgets()  # unknown budget names fail here, before any work
    text = load_text(cfg.corpus)
    model = model if model is not None else load_model(cfg.model)
    for b in budgets.values():
        if hasattr(b, "check"):
            b.check(model)
    out = cfg.out_dir()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    conf = {**{k: v for k, v in dataclasses.asdict(cfg).items() if k != "budgets"},
            "steps": [s for s in registered if s in chosen],
            "budgets": {fam: dataclasses.asdict(b) for fam, b in budgets.items()}}
    if (out / "config.json").exists():  # a partial rerun: the steps of earlier runs stay on record
        done = set(json.loads((out / "config.json").read_text()).get("steps", ())) | set(chosen)
        conf["steps"] = [s for s in registered if s in done]
    (out / "config.json").write_text(json.dumps(conf, indent=2, default=str))
    report = Report(f"tlgeo atlas: {cfg.model}")
    report.text(f"Model {cfg.model} ({model.cfg.n_layers} layers, d_model {model.cfg.d_model}, "
                f"{model.cfg.n_heads} heads / {model.cfg.n_key_value_heads or model.cfg.n_heads} KV heads); "
                f"text: {cfg.corpus}. Budgets: {out / 'config.json'}.", note=True)
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    timings: dict[str, float] = {}
    peak_mb: dict[str, float] = {}
    for name, step in registered.items():
        if name not in chosen:
            continue
        ctx = StepContext(cfg, model, text, report, budgets[step.family], out)
        t = time.perf_counter()
        print(f"[atlas] {name} ...", flush=True)
        step.run(ctx)
        timings[name] = time.perf_counter() - t
        peak_mb[name] = _peak_rss_mb()
        print(f"[atlas] {name} done in {timings[name]:.0f} s (peak RSS so far {peak_mb[name]:.0f} MB)", flush=True)
        report.save(out / "report.html")  # a partial report after every step
    table = pd.DataFrame({"run": started, "step": list(timings), "seconds": list(timings.values()),
                          "peak_rss_mb_so_far": [peak_mb[k] for k in timings]})
    path = out / "timings.csv"  # one block of rows per run, appended (a rerun of cached steps takes ~0 s)
    earlier = pd.read_csv(path) if path.exists() else None
    pd.concat([earlier, table], ignore_index=True).to_csv(path, index=False)
    report.section("Timings").table(table.drop(columns="run"))
    return report.save(out / "report.html")


def _peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MB (``nan`` where unknown)."""
    try:
        import resource
        import sys

        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return rss / 2**20 if sys.platform == "darwin" else rss / 1024  # bytes on macOS, KiB on Linux
    except (ImportError, OSError):
        return float("nan")
