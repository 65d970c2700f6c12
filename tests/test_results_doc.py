"""Every number RESULTS.md quotes comes from a committed table with its provenance.

RESULTS.md names its tables in HTML comments, ``<!-- source: results/<folder>/<table>.csv -->``,
inside the section (``##`` or ``###`` heading) that quotes them; a seed paper's own numbers quoted
beside them come from the module that keeps them, ``<!-- paper: tlgeo/<analysis>/paper.py -->``
(its numeric literals). Each decimal number of a
section's prose and tables (code spans and blocks aside: they are commands) must be a value of
one of the section's tables, rounded as written (a number followed by ``%`` may be the value
times 100). Each table must be committed (not ignored by git) and its folder must hold the
``provenance.jsonl`` of the commands that made it (:mod:`tlgeo.runner.provenance`).
"""

from __future__ import annotations

import re
import subprocess
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "RESULTS.md"
SOURCE = re.compile(r"<!--\s*source:\s*(\S+)\s*-->")
PAPER = re.compile(r"<!--\s*paper:\s*(\S+)\s*-->")  # a seed paper's numbers, as tlgeo's code keeps them
NUMBER = re.compile(r"(?<![\w.])([-−+]?)(\d+\.\d+(?:e[+-]?\d+)?)(?![\w.])(\s*%)?")


def sections(text: str) -> list[tuple[str, str]]:
    """``(heading, body)`` of every ``##`` / ``###`` section, fenced code blocks and code spans removed."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    parts = re.split(r"^(#{2,3} .*)$", text, flags=re.M)
    return [("(top)", parts[0])] + [(parts[i].strip(), parts[i + 1]) for i in range(1, len(parts) - 1, 2)]


def quoted(body: str) -> list[tuple[float, int, bool, str]]:
    """Each decimal number of ``body`` outside comments, code and generated tables (``<!-- table: name -->``
    blocks, equal to what their script prints from their tables: ``tests/test_claims.py``), and not a test's
    threshold (``p < 0.001``, ``q < 0.05``: its claim checks it): (value, decimals, percent, as written)."""
    body = re.sub(r"<!--\s*table:.*?<!--\s*/table\s*-->", "", body, flags=re.S)
    body = re.sub(r"\b[pq] [<>≤≥] \d+\.\d+", "", body)
    body = re.sub(r"<!--.*?-->", "", body, flags=re.S)
    body = re.sub(r"```.*?```", "", body, flags=re.S)
    body = re.sub(r"`[^`\n]*`", "", body)
    out = []
    for m in NUMBER.finditer(body):
        sign = -1.0 if m.group(1) in ("-", "−") else 1.0
        mantissa, _, exponent = m.group(2).partition("e")
        decimals = len(mantissa.split(".")[1]) - int(exponent or 0)  # 4.052e4: to the nearest 10
        out.append((sign * float(m.group(2)), decimals, bool(m.group(3)), m.group(0).strip()))
    return out


@lru_cache(maxsize=None)
def table_values(path: str) -> np.ndarray:
    """Every number in the table at ``path`` (relative to the repository), float64."""
    df = pd.read_csv(ROOT / path)
    cols = [df[c] for c in df.columns if pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])]
    vals = np.concatenate([c.to_numpy(float) for c in cols]) if cols else np.zeros(0)
    return vals[np.isfinite(vals)]


@lru_cache(maxsize=None)
def paper_values(path: str) -> np.ndarray:
    """Every numeric literal of the Python module at ``path`` (a seed paper's numbers)."""
    import ast

    tree = ast.parse((ROOT / path).read_text())
    vals = [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and not isinstance(n.value, bool)
    ]
    return np.asarray(vals, dtype=float)


def found(value: float, decimals: int, percent: bool, values: np.ndarray) -> bool:
    tol = 0.5 * 10.0**-decimals + 1e-9
    candidates = [values, values * 100] if percent else [values]
    return any(np.any(np.abs(v - value) <= tol) for v in candidates)


def _committed(path: str) -> bool:
    ignored = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT).returncode == 0
    return (ROOT / path).is_file() and not ignored


def _has_provenance(path: str) -> bool:
    folder = (ROOT / path).parent
    while folder != ROOT and folder.name != "results":
        if (folder / "provenance.jsonl").is_file():
            return True
        folder = folder.parent
    return False


def test_the_checker_finds_a_number_with_no_source():
    body = "F ~ tok_error +0.45 [0.21, 0.58] in 6 of 6 blocks; 34.5 % of prompts; 4.052e4; `--delta 0.2` is a flag"
    assert [q[3] for q in quoted(body)] == ["+0.45", "0.21", "0.58", "34.5 %", "4.052e4"]
    assert [q[3] for q in quoted("q < 0.05 and p 0.021\n<!-- table: t -->\n| 0.77 |\n<!-- /table -->\n0.3")] == [
        "0.021",
        "0.3",
    ]
    values = np.array([0.4512, 0.2149, 0.345, 40518.0])
    assert found(0.45, 2, False, values) and found(34.5, 1, True, values) and not found(0.58, 2, False, values)
    assert found(40520.0, -1, False, values) and not found(40560.0, -1, False, values)


def test_every_source_is_committed_with_its_provenance():
    cited = sorted(set(SOURCE.findall(DOC.read_text())))
    assert cited, "RESULTS.md names no source table"
    missing = [p for p in cited if not _committed(p)]
    assert not missing, f"sources not committed (or ignored by .gitignore): {missing}"
    bare = [p for p in cited if not _has_provenance(p)]
    assert not bare, f"sources whose folder has no provenance.jsonl: {bare}"


@pytest.mark.parametrize("heading, body", sections(DOC.read_text()), ids=lambda x: str(x)[:40])
def test_every_number_in_a_section_is_in_its_sources(heading, body):
    numbers = quoted(body)
    sources, papers = SOURCE.findall(body), PAPER.findall(body)
    if not numbers:
        return
    assert sources, f"{heading!r} quotes {[n[3] for n in numbers][:5]} and names no source table"
    values = np.concatenate([table_values(p) for p in sources] + [paper_values(p) for p in papers])
    unsourced = [w for v, d, pct, w in numbers if not found(v, d, pct, values)]
    assert not unsourced, f"{heading!r}: numbers in none of {sources}: {unsourced}"


def _folders_and_code():
    """``(reproduce, the quoted folders, the code commit of the first)``; skips in a clone that lacks that commit."""
    from tlgeo.runner.provenance import read

    from .scripts import load_script

    reproduce = load_script("reproduce")
    folders = reproduce.quoted_folders(DOC)
    code = reproduce.code_commit((read(folders[0])[0].get("git") or {}).get("commit"), ROOT)
    if code is None:
        pytest.skip("this clone lacks the commit that made the folders (a shallow clone)")
    return reproduce, folders, code


def test_every_quoted_folder_was_made_from_a_clean_tree_at_one_code_commit():
    """``make results`` (``scripts/reproduce.py --all``) reruns every quoted folder at one commit: each line of each
    folder's provenance names a clean tree, and all of them the same code (the last commit that changed a file
    outside ``results/``, ``docs/``, ``tests/``, ``notebooks/`` and ``*.md``). The one RESULTS.md names."""
    from tlgeo.runner.provenance import read

    reproduce, folders, code = _folders_and_code()
    other = {
        f.name: [((p.get("git") or {}).get("commit", "")[:12], (p.get("git") or {}).get("dirty")) for p in read(f)]
        for f in folders
        if not reproduce.made_by(f, code, ROOT)
    }
    assert not other, f"folders with a line made from an uncommitted tree or from code other than {code[:12]}: {other}"
    assert f"`{code[:7]}`" in DOC.read_text(), f"RESULTS.md does not name the code commit {code[:7]} of its folders"


def test_every_code_change_after_the_folders_were_made_is_named():
    """RESULTS.md's opening names each commit that changed the code after the one its folders were made from,
    so that a reader knows what the tables do not yet reflect (``make results`` reruns them at the new code)."""
    import subprocess

    reproduce, folders, code = _folders_and_code()
    later = subprocess.run(
        [
            "git",
            "-C",
            str(ROOT),
            "log",
            "--format=%h",
            "--abbrev=7",
            f"{code}..HEAD",
            "--",
            ".",
            *(f":(exclude){p}" for p in reproduce.NOT_CODE),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    opening = DOC.read_text().split("\n## ", 1)[0]
    assert not [h for h in later if f"`{h[:7]}`" not in opening], f"code commits after {code[:7]} not named: {later}"


def test_every_quoted_interval_beside_a_p_excludes_zero_exactly_when_p_is_below_005():
    """RESULTS.md's opening: at the folders' code every interval reported beside a p inverts that p's test. Each
    table of a quoted folder with ``ci_low``, ``ci_high`` and ``p``: the interval excludes 0 exactly when p < 0.05
    (rows where either is undefined aside)."""
    from .scripts import load_script

    checked, bad = 0, {}
    for folder in load_script("reproduce").quoted_folders(DOC):
        for table in sorted([*folder.glob("*.csv"), *folder.glob("*.csv.gz")]):
            head = pd.read_csv(table, nrows=0).columns
            if not {"ci_low", "ci_high", "p"} <= set(head):
                continue
            df = pd.read_csv(table, usecols=["ci_low", "ci_high", "p"]).dropna()
            excludes = ~((df["ci_low"] <= 0) & (0 <= df["ci_high"]))
            checked += 1
            if (n := int((excludes != (df["p"] < 0.05)).sum())) > 0:
                bad[str(table.relative_to(ROOT))] = n
    assert checked >= 8, f"only {checked} tables with an interval and a p among the quoted folders"
    assert not bad, f"tables whose interval and p disagree (rows): {bad}"
