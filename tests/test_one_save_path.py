"""One way to finish a table: an analysis hands its tables to :meth:`tlgeo.runner.analysis.Result.deliver` (save,
then show); only the runner merges CSVs, and no result class saves its own way. A second path fails here."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tlgeo"
RUNNER = ("runner", "storage")  # the layers that own the disk

# CSV files written outside a Result, each with why it is not a result table. A new entry needs a reason here.
NOT_RESULT_TABLES = {
    ("train/loop.py", "write_csv"): "the training log, cut back to the resumed step (a log, not a result table)",
    ("report/atlas.py", "write_csv"): "the atlas's timing log, one block of rows appended per run",
    ("decomposition/analysis.py", "write_csv"): "the per-token dump, named by its settings (ProfileConfig)",
    ("decomposition/analysis.py", "merge_csv"): "the per-token dump of some sites, merged by site and position",
    ("compression/compress.py", "write_csv"): "tlgeo compress's evaluation of the compressed models (ppl, zeroshot)",
    ("compression/cli.py", "write_csv"): "ppl_prediction.csv, from the diagnosis and tlgeo compress's ppl",
}


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in RUNNER:
            continue
        yield rel.as_posix(), ast.parse(path.read_text(), filename=str(path))


def _called(node: ast.Call) -> str | None:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def writers(rel: str, tree: ast.AST) -> list[str]:
    """Where ``tree`` (module ``rel``) writes a table some other way than ``Result.deliver``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called(node) in ("write_csv", "merge_csv"):
            if (rel, _called(node)) not in NOT_RESULT_TABLES:
                found.append(f"{rel}:{node.lineno} {_called(node)}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "save":
            receiver = ast.unparse(node.func.value)
            if "Result" in receiver or receiver in ("res", "result", "self"):
                found.append(f"{rel}:{node.lineno} {receiver}.save (finish it with .deliver)")
        if isinstance(node, ast.ClassDef) and any("Result" in ast.unparse(b) for b in node.bases):
            own = [f.name for f in node.body if isinstance(f, ast.FunctionDef) and f.name in ("save", "deliver")]
            found += [f"{rel}:{node.lineno} {node.name}.{name} (a Result's own save path)" for name in own]
    return found


def test_every_analysis_finishes_its_tables_through_deliver():
    found = [w for rel, tree in _modules() for w in writers(rel, tree)]
    assert not found, f"tables written another way than Result.deliver: {found}"


def test_the_allowed_writers_still_exist():
    """An entry of :data:`NOT_RESULT_TABLES` whose writer went is removed with it (the list only shrinks)."""
    calls = {
        (rel, _called(n))
        for rel, tree in _modules()
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and _called(n) in ("write_csv", "merge_csv")
    }
    assert not set(NOT_RESULT_TABLES) - calls, f"stale entries: {set(NOT_RESULT_TABLES) - calls}"


def test_the_check_finds_a_second_save_path():
    bad = ast.parse(
        "class FooResult(Result):\n    def save(self, out):\n        merge_csv(out, self.x, ())\n"
        "def run(out):\n    FooResult(x=1).save(out)\n    write_csv(out, 1)\n"
    )
    found = writers("foo/analysis.py", bad)
    assert len(found) == 4, found
    assert not writers("foo/analysis.py", ast.parse("def run(out):\n    FooResult(x=1).deliver(out, None)\n"))


def test_only_deliver_calls_save_in_the_runner():
    tree = ast.parse((PACKAGE / "runner" / "analysis.py").read_text())
    callers = {
        f.name
        for f in ast.walk(tree)
        if isinstance(f, ast.FunctionDef)
        for n in ast.walk(f)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "save"
    }
    assert callers == {"deliver"}, callers
