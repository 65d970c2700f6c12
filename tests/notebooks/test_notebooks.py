"""Execute the example notebooks end to end with nbclient.

:func:`run_notebook` is the reusable piece: it runs a notebook in a fresh
kernel of *this* interpreter (so the kernel sees the same environment and the
editable ``tlgeo`` as pytest), after injecting parameter overrides below the
cell tagged ``parameters`` (papermill convention). The tests run each
notebook on a tiny random model. ``scripts/execute_notebooks.py`` runs them on SmolLM2 at
their defaults, checks the quickstart's real outputs (:func:`check_quickstart` and the
perplexity ordering) and saves every notebook with its outputs.
"""

from __future__ import annotations

import copy
import math
import os
import re
import sys
from pathlib import Path
from typing import Any, Iterator, Mapping

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from jupyter_client.kernelspec import KernelSpec, KernelSpecManager  # noqa: E402
from jupyter_client.manager import AsyncKernelManager  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
QUICKSTART = NOTEBOOKS / "01_quickstart.ipynb"
CELL_TIMEOUT = 600  # seconds per cell
MAX_OUTPUT_BYTES = 1_000_000  # larger outputs are not saved into the repository

PARAMS_TAG = "injected-parameters"
CHECK_TAG = "injected-kernel-check"
_PREFIX_MARK = "tlgeo-test kernel sys.prefix="


# ---------------------------------------------------------------------------
# Kernel: always this interpreter, whatever kernelspecs are installed
# ---------------------------------------------------------------------------


class _ThisPythonSpecs(KernelSpecManager):
    """Every kernel name resolves to an ipykernel running ``sys.executable``.

    A ``python3`` kernelspec elsewhere on the Jupyter path (a user-wide one, or
    one from another environment) could otherwise start a different Python.
    """

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        from ipykernel.kernelspec import RESOURCES, get_kernel_dict

        spec = get_kernel_dict()  # argv: [sys.executable, "-m", "ipykernel_launcher", "-f", ...]
        spec["argv"][0] = sys.executable
        known = KernelSpec.class_trait_names()
        return KernelSpec(resource_dir=RESOURCES, **{k: v for k, v in spec.items() if k in known})


class _ThisPythonKernelManager(AsyncKernelManager):
    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("kernel_spec_manager", _ThisPythonSpecs())
        super().__init__(**kwargs)


_SHARED_KERNEL: dict[str, Any] = {}


def _shared_kernel_manager() -> "_ThisPythonKernelManager":
    """This process's one kernel manager for ``run_notebook(shared_kernel=True)``; its kernel is
    started by the first notebook and shut down when the process exits."""
    if "km" not in _SHARED_KERNEL:
        import atexit

        from jupyter_core.utils import run_sync

        km = _SHARED_KERNEL["km"] = _ThisPythonKernelManager(kernel_name="python3")

        def stop() -> None:
            if km.has_kernel:
                run_sync(km.shutdown_kernel)(now=True)

        atexit.register(stop)
    return _SHARED_KERNEL["km"]


# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------


def _parameters_index(nb) -> int:
    for i, cell in enumerate(nb.cells):
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            return i
    raise ValueError("the notebook has no cell tagged 'parameters'")


def _injected_cells(nb, params: Mapping[str, Any]):
    """A kernel check at the top and, when ``params``, overrides after the parameters cell."""
    cells = list(nb.cells)
    check = nbformat.v4.new_code_cell(
        f"import sys\nprint({_PREFIX_MARK!r} + sys.prefix)", metadata={"tags": [CHECK_TAG]}
    )
    if params:
        lines = ["# Parameters injected by tests/test_notebooks.py"]
        lines += [f"{name} = {value!r}" for name, value in params.items()]
        cell = nbformat.v4.new_code_cell("\n".join(lines), metadata={"tags": [PARAMS_TAG]})
        cells.insert(_parameters_index(nb) + 1, cell)
    return [check, *cells]


def run_notebook(
    path: str | os.PathLike,
    params: Mapping[str, Any] | None = None,
    *,
    timeout: int = CELL_TIMEOUT,
    save_to: str | os.PathLike | None = None,
    shared_kernel: bool = False,
):
    """Execute the notebook at ``path`` and return the executed ``NotebookNode``.

    ``params`` (names to Python literals) are set in a cell injected after the
    cell tagged ``parameters``. The kernel is an ipykernel of this interpreter
    (checked: the run fails if the kernel's ``sys.prefix`` differs), started in
    the notebook's directory with this checkout first on ``PYTHONPATH``. Any cell error raises
    ``nbclient.exceptions.CellExecutionError`` with the traceback. ``save_to``:
    also write the executed notebook there, cleaned by :func:`clean_for_saving`.
    ``shared_kernel``: run in this process's one reused kernel, its user namespace reset and its
    figures closed first (the tiny-model tests: torch and TransformerLens are imported once,
    not once per notebook; a notebook that leans on another's names still fails on the reset).
    """
    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    params = dict(params or {})
    if params:
        _parameters_index(nb)  # fail early on a notebook without parameters
    nb.cells = _injected_cells(nb, params)
    if shared_kernel:
        # A fresh namespace, and torch's global modes as a new kernel has them. `%reset` collects
        # garbage twice over the whole heap (torch and TransformerLens: ~1 s a reset, profiled): what exists is
        # frozen out of the collector first (the last notebook's objects are freed by reference count;
        # a cycle among them stays, tiny models only).
        reset = nbformat.v4.new_code_cell(
            "import gc\ngc.freeze()\nget_ipython().run_line_magic('reset', '-f')\n"
            "import matplotlib.pyplot, torch\nmatplotlib.pyplot.close('all')\n"
            "torch.set_grad_enabled(True); torch.set_default_dtype(torch.float32)",
            metadata={"tags": [CHECK_TAG]})
        nb.cells.insert(0, reset)
    client = nbclient.NotebookClient(
        nb,
        km=_shared_kernel_manager() if shared_kernel else None,
        timeout=timeout,
        kernel_name="python3",
        kernel_manager_class=_ThisPythonKernelManager,
        resources={"metadata": {"path": str(path.parent)}},
        record_timing=False,
    )
    # The kernel runs in the notebook's directory; put this checkout first on its path
    # so it imports the tlgeo under test (whatever is, or is not, installed).
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    try:
        client.execute(env=env, cwd=str(path.parent))
    finally:
        if shared_kernel and client.kc is not None:
            client.kc.stop_channels()  # the kernel stays; this notebook's client goes
    if shared_kernel:
        nb.cells.pop(0)

    prefix = [line for line in _stream_lines(nb.cells[0]) if line.startswith(_PREFIX_MARK)]
    assert prefix == [_PREFIX_MARK + sys.prefix], (
        f"the notebook kernel is not this interpreter ({sys.prefix}): {prefix}"
    )
    if save_to is not None:
        nbformat.write(clean_for_saving(nb), Path(save_to))
    return nb


# ---------------------------------------------------------------------------
# Saving executed notebooks into the repository
# ---------------------------------------------------------------------------

_CV_LOCAL = re.compile(
    r'CircuitsVis\.render\(\s*"(?P<uuid>[^"]+)",\s*CircuitsVis\.(?P<name>\w+),\s*(?P<props>.*)\)\s*</script>\s*$',
    re.DOTALL,
)


def _circuitsvis_to_cdn(html: str) -> str | None:
    """circuitsvis inlines its 1.3 MB JavaScript bundle when offline; keep only the
    figure's data and load the bundle from the CDN instead (what it does online)."""
    start = html.rfind("CircuitsVis.render(")
    m = _CV_LOCAL.search(html, start) if start >= 0 else None
    if m is None:
        return None
    import circuitsvis

    return (
        f'<div id="{m["uuid"]}" style="margin: 15px 0;"/>\n'
        '<script crossorigin type="module">\n'
        f'import {{ render, {m["name"]} }} from '
        f'"https://unpkg.com/circuitsvis@{circuitsvis.__version__}/dist/cdn/esm.js";\n'
        f'render(\n  "{m["uuid"]}",\n  {m["name"]},\n  {m["props"].strip()}\n)\n</script>'
    )


def _size(value) -> int:
    return len("".join(value) if isinstance(value, list) else str(value))


def clean_for_saving(nb):
    """A copy without the injected cells, with execution counts from 1 and no
    output over :data:`MAX_OUTPUT_BYTES` (circuitsvis figures switched to the CDN)."""
    nb = copy.deepcopy(nb)
    nb.cells = [
        c for c in nb.cells if not {PARAMS_TAG, CHECK_TAG} & set(c.get("metadata", {}).get("tags", []))
    ]
    count = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        count += 1
        cell.execution_count = count
        outputs = []
        for out in cell.get("outputs", []):
            if "execution_count" in out:
                out["execution_count"] = count
            data = out.get("data", {})
            if _size(data.get("text/html", "")) > MAX_OUTPUT_BYTES:
                small = _circuitsvis_to_cdn("".join(data["text/html"]) if isinstance(
                    data["text/html"], list) else data["text/html"])
                if small is not None:
                    data["text/html"] = small
            big = [k for k, v in data.items() if _size(v) > MAX_OUTPUT_BYTES]
            for k in big:
                del data[k]
            if out.get("output_type") == "stream" and _size(out.get("text", "")) > MAX_OUTPUT_BYTES:
                out["text"] = "[output over 1 MB removed]\n"
            if big and not data:
                continue
            outputs.append(out)
        cell.outputs = outputs
    nbformat.validate(nb)
    return nb


# ---------------------------------------------------------------------------
# Reading outputs
# ---------------------------------------------------------------------------


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _stream_lines(cell) -> list[str]:
    """The cell's stdout lines. The kernel flushes stdout on a timer, so one ``print`` can arrive as two
    stream outputs (a busy machine split ``print("a:", x)`` after ``"a:"``): join them before splitting."""
    return "".join(_text(out.get("text", "")) for out in cell.get("outputs", [])
                   if out.get("output_type") == "stream" and out.get("name") == "stdout").splitlines()


def iter_outputs(nb, mime: str | None = None) -> Iterator[str]:
    """Text of every output (``mime`` given: only that type of rich output)."""
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if mime is None and out.get("output_type") == "stream":
                yield _text(out.get("text", ""))
            data = out.get("data", {})
            if mime is None:
                yield from (_text(v) for k, v in data.items() if k.startswith("text/"))
            elif mime in data:
                yield _text(data[mime])


def stdout(nb) -> str:
    return "\n".join(line for cell in nb.cells for line in _stream_lines(cell))


def printed_perplexities(nb) -> dict[str, float]:
    """``{edit: perplexity}`` from lines ``"<edit>  perplexity <number>"``."""
    found = re.findall(r"^(.+?)\s+perplexity\s+(\S+)\s*$", stdout(nb), re.MULTILINE)
    return {name.strip(): float(value) for name, value in found}


# ---------------------------------------------------------------------------
# 01_quickstart
# ---------------------------------------------------------------------------


def check_quickstart(nb) -> dict[str, float]:
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    # 1. the per-token table of one layer
    tables = [h for h in iter_outputs(nb, "text/html") if "<table" in h and "|y_par|/|y_perp|" in h]
    assert tables, "no per-token parallel-ratio table"
    # 2. the per-layer profile plot
    assert any(True for _ in iter_outputs(nb, "image/png")), "no matplotlib figure"
    # 3. the perplexities: all three conditions, finite
    ppl = printed_perplexities(nb)
    assert set(ppl) == {"unedited", "value_excl_self, s_par=0", "attn, s_perp=0"}, ppl
    assert all(math.isfinite(v) and v > 1 for v in ppl.values()), ppl
    # 4. two circuitsvis attention figures, and the diagonal removed
    figures = [h for h in iter_outputs(nb, "text/html") if "circuits-vis-" in h and "AttentionPatterns" in h]
    assert len(figures) == 2, f"{len(figures)} circuitsvis figures"
    diag = re.search(r"mean A_tt ([0-9.]+) -> ([0-9.]+); rows sum to 1: True", stdout(nb))
    assert diag, "diagonal-removal summary missing"
    assert float(diag[2]) < 1e-3 < float(diag[1])
    return ppl


def test_quickstart_tiny():
    nb = run_notebook(QUICKSTART, {"MODEL": "tiny:llama", "N_TOKENS": 256}, shared_kernel=True)
    check_quickstart(nb)
    assert "tiny:llama: 3 layers" in stdout(nb)


def test_run_notebook_injects_parameters(tmp_path):
    """The helper itself: overrides land after the parameters cell, errors surface."""
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("A = 1\nB = 'x'", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("print('A', A, 'B', B)"),
    ])
    path = tmp_path / "p.ipynb"
    nbformat.write(nb, path)
    out = run_notebook(path, {"A": 2})
    assert "A 2 B x" in stdout(out)
    saved = tmp_path / "saved.ipynb"
    run_notebook(path, {}, save_to=saved)
    clean = nbformat.read(saved, as_version=4)
    assert len(clean.cells) == 2 and [c.execution_count for c in clean.cells] == [1, 2]

    nb.cells.append(nbformat.v4.new_code_cell("raise RuntimeError('boom')"))
    nbformat.write(nb, path)
    with pytest.raises(nbclient.exceptions.CellExecutionError, match="boom"):
        run_notebook(path)
    with pytest.raises(ValueError, match="parameters"):
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")]), path)
        run_notebook(path, {"A": 1})
