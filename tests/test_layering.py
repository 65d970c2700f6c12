"""The package's import layers (ARCHITECTURE.md), checked on the source of every module.

A module may import tlgeo code from its own unit (top-level subpackage or
module) and from units in lower layers, never from a higher layer or from
another unit of its own layer. Imports inside functions count too. The pure
math layer imports no model code at all.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tlgeo.report.registry import ANALYSES  # noqa: E402  (imports only the contract)

PACKAGE = Path(__file__).resolve().parents[1] / "tlgeo"

LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"geometry", "stats", "version", "errors"}),  # 0 pure math: tensors in, tensors out; the version;
    #   the user's errors
    frozenset({"storage"}),  # 0b atomic writes, folder locks, checksums
    frozenset({"data", "plotting", "families"}),  # 1 text, figure style, model families
    frozenset({"models"}),  # 2 models
    frozenset({"hooks", "runner", "planner"}),  # 3 sites, the hook adapter, edits, resumed forwards; the
    #   runner (the analysis contract, result tables and
    #   logs, provenance, run identity, CLI arguments,
    #   data-parallel runs); cost plans of an analysis
    frozenset({"evals"}),  # 4 perplexity, zero-shot, RULER, lm-eval
    frozenset(p.split(".")[1] for p in ANALYSES) - {"geometries", "circuits"},  # 5 the analyses: the registry's
    frozenset({"geometries", "circuits"}),  # 6 one token, four geometries: reads the analyses;
    #   circuits: patching's tasks, scored edge by edge
    frozenset({"report"}),  # 7 atlas and HTML report
    frozenset({"cli"}),  # 8 the command line
    frozenset({"__main__"}),  # 9 python -m tlgeo (and torchrun -m tlgeo)
)
BELOW_ALL = frozenset({"errors"})  # the user's errors import nothing: any module raises them where it finds a mistake
LAYER_NAMES = ("0", "0b", "1", "2", "3", "4", "5", "6", "7", "8", "9")  # as ARCHITECTURE.md numbers them
ROOT_LAYER = 6  # tlgeo/__init__.py re-exports the public API: up to the analyses, never report or cli

# third-party code the pure layers must not touch (they know nothing of models or plots)
MODEL_CODE = (
    "transformer_lens",
    "transformers",
    "accelerate",
    "datasets",
    "llmcompressor",
    "lm_eval",
    "circuitsvis",
    "tlgeo.models",
)
FORBIDDEN = {
    unit: MODEL_CODE + ("matplotlib",)
    for unit in (
        "geometry",
        "stats",
        "storage",
        "errors",
        # the runner's modules that know no model
        "runner.analysis",
        "runner.cliargs",
        "runner.results",
        "runner.provenance",
    )
}
FORBIDDEN["plotting"] = tuple(
    m for m in MODEL_CODE if m != "circuitsvis"
)  # figures (circuitsvis views too), yes; models, no


def layer_of(unit: str) -> int:
    if unit == "":
        return ROOT_LAYER
    for i, units in enumerate(LAYERS):
        if unit in units:
            return i
    raise KeyError(unit)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit_of(module: str) -> str:
    """``tlgeo.hooks.edits`` -> ``hooks``; ``tlgeo`` -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imported_modules(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """``(line, absolute module)`` of every import in ``source``, relative ones resolved."""
    package = module if is_package else module.rpartition(".")[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if node.module is None:  # from . import x: x is a submodule, or a name of the package itself
                out += [
                    (node.lineno, f"{target}.{a.name}" if _is_module(f"{target}.{a.name}") else target)
                    for a in node.names
                ]
            else:
                out.append((node.lineno, target))
    return out


def violations(path: Path, source: str) -> list[str]:
    module = module_name(path)
    unit = unit_of(module)
    try:
        own = layer_of(unit)
    except KeyError:
        return [f"{module}: unit {unit!r} is in no layer; add it to LAYERS here and to ARCHITECTURE.md"]
    found = []
    for line, target in imported_modules(source, module, path.name == "__init__.py"):
        where = f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}"
        inner = module.split(".", 1)[-1]  # runner.results
        for name in (unit, inner):
            if target.startswith(FORBIDDEN.get(name, ())):
                found.append(f"{where}: {name} holds no model code")
        if not (target == "tlgeo" or target.startswith("tlgeo.")):
            continue
        other = unit_of(target)
        if other == unit or other in BELOW_ALL:
            continue
        if other == "":  # tlgeo/__init__ re-exports layers 0-4: only the layers above it may use it
            if own <= ROOT_LAYER:
                found.append(f"{where}: only report and cli may import from tlgeo/__init__")
            continue
        theirs = layer_of(other)
        if theirs > own:
            found.append(
                f"{where}: upward, layer {LAYER_NAMES[own]} ({unit or 'tlgeo'}) -> "
                f"layer {LAYER_NAMES[theirs]} ({other})"
            )
        elif theirs == own and unit:
            found.append(f"{where}: sideways, {unit} and {other} share layer {LAYER_NAMES[own]}")
    return found


def test_every_module_keeps_to_its_layer():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 40
    found = [v for f in files for v in violations(f, f.read_text(encoding="utf-8"))]
    assert not found, "\n".join(found)


def test_every_unit_is_in_a_layer():
    units = {
        p.stem if p.is_file() else p.name
        for p in PACKAGE.iterdir()
        if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").exists()
    }
    assert units == set().union(*LAYERS), "every top-level module or subpackage needs a layer"


@pytest.mark.parametrize(
    "path, source, problem",
    [
        ("geometry/parallel.py", "from ..hooks.edits import Edit", "upward, layer 0 (geometry) -> layer 3 (hooks)"),
        ("geometry/parallel.py", "def f():\n    import transformer_lens", "geometry holds no model code"),
        ("stats/resampling.py", "from tlgeo.models import load_model", "stats holds no model code"),
        ("geometry/parallel.py", "import matplotlib.pyplot as plt", "geometry holds no model code"),
        ("plotting.py", "from transformer_lens import HookedTransformer", "plotting holds no model code"),
        ("hooks/edits.py", "from ..decomposition.observe import parallel_profile", "upward"),
        ("hooks/edits.py", "def f():\n    from ..evals import perplexity", "upward, layer 3 (hooks) -> layer 4"),
        ("evals/ruler/tasks.py", "from ...report.html import Report", "upward"),
        ("decomposition/atlas.py", "from ..report import registry", "upward, layer 5 (decomposition) -> layer 7"),
        ("decomposition/atlas.py", "from ..compression import decompose", "sideways"),
        ("compression/llmc.py", "from .. import cli", "upward"),
        ("report/atlas.py", "from ..cli import main", "upward, layer 7 (report) -> layer 8 (cli)"),
        ("hooks/sites.py", "from .. import Edit", "only report and cli may import from tlgeo/__init__"),
        ("__init__.py", "from .report.atlas import run_atlas", "upward"),
        ("magnitude/perturb.py", "import torch", "is in no layer"),
        ("runner/results.py", "from ..models import load_model", "runner.results holds no model code"),
        ("models/loading.py", "from ..runner.results import IDENTITY", "upward, layer 2 (models) -> layer 3 (runner)"),
        ("hooks/edits.py", "from ..runner.results import IDENTITY", "sideways"),
        ("errors.py", "from .geometry.parallel import EPS", "sideways, errors and geometry share layer 0"),
    ],
)
def test_the_check_catches_bad_imports(path, source, problem):
    found = violations(PACKAGE / path, source)
    assert any(problem in v for v in found), found


@pytest.mark.parametrize(
    "path, source",
    [
        ("geometry/parallel.py", "import torch\nfrom .value_space import expand_kv"),
        ("hooks/edits.py", "from ..geometry.parallel import scaled_delta\nfrom .sites import get_site"),
        (
            "decomposition/atlas.py",
            "from ..runner.analysis import register_analysis_step\nfrom ..evals.ruler import evaluate_ruler",
        ),
        ("train/loop.py", "from . import parallel as D"),
        ("cli.py", "from .report.atlas import run_atlas\nfrom .train.cli import run\nfrom . import __version__"),
        ("geometry/parallel.py", "from ..errors import InputError"),  # the user's errors: raised in any layer
    ],
)
def test_the_check_allows_downward_imports(path, source):
    assert violations(PACKAGE / path, source) == []


# a name of an analysis that is also a word of the families' own text (attention heads, a dict of sizes): checked
# only if it is a support column, and then found as a whole string literal only
PLAIN_WORDS = frozenset({"heads"})


def analysis_names_in(source: str, names: set[str]) -> list[str]:
    """The ``names`` that ``source`` mentions: as a word anywhere (a comment, a docstring, a key), or, for the
    :data:`PLAIN_WORDS`, as a whole string literal (a support column's key)."""
    import re

    tree = ast.parse(source)
    literals = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}

    def mentioned(n: str) -> bool:
        if n in PLAIN_WORDS:
            return n in literals
        return re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", source) is not None

    return sorted(n for n in names if mentioned(n))


def test_the_families_know_no_analysis():
    """The families layer holds the sites' rules and the families' traits; every analysis's support rule is in
    its own record (or its package), so no analysis name, and no support column but a site's, is in it."""
    from tlgeo.families import SITE_COLUMNS
    from tlgeo.report.registry import load_analyses, support_columns

    columns = set(support_columns()) - set(SITE_COLUMNS)  # a plain word is checked where it is a column
    names = (set(load_analyses()) - PLAIN_WORDS) | columns
    assert {"dirmag", "pdsf", "tokenwise", "patching", "compression", "train", "geometries", "audit"} <= names
    files = sorted((PACKAGE / "families").rglob("*.py"))
    assert len(files) > 10
    found = {
        str(f.relative_to(PACKAGE.parent)): got
        for f in files
        if (got := analysis_names_in(f.read_text(encoding="utf-8"), names))
    }
    assert not found, found


@pytest.mark.parametrize(
    "source, found",
    [
        ('FAMILY = Family("gpt2", support={"compression": Support("no", "why")})', ["compression"]),
        ('if column == "dirmag" and f.post_ln:\n    pass', ["dirmag"]),
        ("# the pdsf rule\nx = 1", ["pdsf"]),
        ('x = "heads"', ["heads"]),
        ('x = "the edited heads\' output"  # sinks per head', []),
        ('x = "pretraining builds its own models"', []),
    ],
)
def test_the_name_check_catches_an_analysis_name(source, found):
    assert analysis_names_in(source, {"compression", "dirmag", "pdsf", "heads", "train"}) == found
