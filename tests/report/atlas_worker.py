"""The tiny atlas of the report tests (:func:`tests.report.conftest.tiny_cfg`) under torchrun, or alone.

    python -m torch.distributed.run --standalone --nproc_per_node=2 tests/report/atlas_worker.py OUT [steps=A,B]
        [fail_out=OUT2 fail_steps=C,D fail=STEP]

``steps``: comma-separated (default: all). With ``fail_out`` the same processes then run
``fail_steps`` into ``OUT2`` with ``fail`` raising on rank 1 (one launch for both runs: each launch
costs every rank an import of torch and TransformerLens); the :class:`RankFailed` of that run is
printed on stderr and the process exits with 3. The test's run: :data:`SHARED`, then
:data:`FAIL_STEPS` with :data:`FAIL` failing (in :mod:`tests.torchrun_worker`).
"""

import dataclasses
import sys

import torch

from tlgeo.runner.distributed import RankFailed, ranks
from tlgeo.models import tiny_model
from tlgeo.report.atlas import AtlasConfig, run_atlas
from tlgeo.report.registry import load_steps

from tests.report.conftest import tiny_cfg

# steps whose units the ranks share (the one-process run of the report tests ran them all)
SHARED = ("profile", "patching")  # (every analysis runs under torchrun in tests/distributed)
FAIL_STEPS, FAIL = ("closed_form", "audit"), "audit"  # audit fails on rank 1


def _run(model, out: str, steps: str) -> None:
    cfg = tiny_cfg(out)
    if steps:
        cfg = AtlasConfig(**{**cfg.__dict__, "steps": tuple(steps.split(","))})
    path = run_atlas(cfg, model=model)
    assert (path is None) == (ranks().rank > 0), (path, ranks())


def _break(name: str) -> None:
    """Make the analysis of step ``name`` raise on rank 1."""
    from tlgeo.runner import analysis

    def broken(model, cfg, **kwargs):
        raise ValueError(f"{name} broke on purpose")

    if ranks().rank == 1:
        step = load_steps()[name]
        analysis._STEPS[name] = dataclasses.replace(step, analysis=dataclasses.replace(step.analysis, run=broken))


def main(out: str, steps: str = "", fail_out: str = "", fail_steps: str = "", fail: str = "") -> int:
    """The exit code: 3 when the failed run raised :class:`RankFailed` (printed on stderr), else 0."""
    torch.set_num_threads(1)
    model = tiny_model("llama")
    _run(model, out, steps)
    if fail_out:
        _break(fail)
        try:
            _run(model, fail_out, fail_steps)
        except RankFailed as e:  # one write of the whole line, as tlgeo.cli writes its errors: the ranks
            sys.stderr.write(f"RankFailed: {e}\n")  # share stderr, where print's two writes interleave
            sys.stderr.flush()
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], **dict(a.split("=", 1) for a in sys.argv[2:])))
