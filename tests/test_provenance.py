"""Provenance: every command records how its folder was made; scripts/reproduce.py reruns it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tlgeo.cli import main
from tlgeo.runner.provenance import code_state, git_state, read, record, record_table

from .scripts import load_script


def test_a_record_says_what_ran_with_what(tmp_path):
    ident = {"model": "m", "weights": "fp-0", "dtype": "float32"}
    record(tmp_path, ["ppl", "--model", "m"], {"model": "m", "tokens": 8, "_run": print, "sites": ("a",)}, [ident])
    record(tmp_path, ["run"], {})
    first, second = read(tmp_path)
    assert first["command"] == "tlgeo ppl --model m" and first["settings"] == {
        "model": "m",
        "tokens": 8,
        "sites": ["a"],
    }
    assert first["identities"] == [ident] and first["git"] == code_state() and second["argv"] == ["run"]
    assert {"tlgeo", "torch", "transformers", "transformer-lens", "python"} <= set(first["versions"])
    assert first["machine"]["cores"] and first["date"].startswith("20")
    import torch

    assert first["machine"]["torch_threads"] == torch.get_num_threads()  # the threads a command ran on
    # what orders float sums on another CPU: the same command there differs by float noise, and says why
    assert first["machine"]["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    cpu = first["machine"]["cpu_model"]
    assert f": {cpu}\n" in info or "model name" not in info


def test_a_script_s_table_names_the_commit_of_each_row_and_keeps_earlier_invocations(tmp_path):
    """A benchmark's rows each carry the commit and dirty state of the code that measured them; a second invocation
    appends (its own commit on its own rows) and adds its own provenance line, a command that says ``python``."""
    path = record_table(
        tmp_path,
        "timings",
        [{"method": "a", "s": 1.5}, {"method": "b", "s": 3.0}],
        ["scripts/bench_x.py", "--rounds", "1"],
        {"rounds": 1},
    )
    record_table(tmp_path, "timings", [{"method": "a", "s": 2.0}], ["scripts/bench_x.py"], {"rounds": 2})
    table, lines = pd.read_csv(path), read(tmp_path)
    assert list(table.columns[:3]) == ["commit", "dirty", "date"] and list(table["s"]) == [1.5, 3.0, 2.0]
    assert set(table["commit"]) == {code_state()["commit"]} and set(table["dirty"]) == {code_state()["dirty"]}
    assert [x["settings"]["rounds"] for x in lines] == [1, 2] and list(table["date"]) == [lines[0]["date"]] * 2 + [
        lines[1]["date"]
    ]
    assert lines[0]["command"] == "python scripts/bench_x.py --rounds 1" and lines[0]["made_from"] == "script"
    before = path.read_bytes(), (tmp_path / "provenance.jsonl").read_bytes()
    with pytest.raises(ValueError, match="no rows to add to .*timings.csv"):  # every case failed: nothing to record
        record_table(tmp_path, "timings", [], ["scripts/bench_x.py"])
    assert (path.read_bytes(), (tmp_path / "provenance.jsonl").read_bytes()) == before


def test_a_command_records_its_provenance_and_reproduce_reruns_it(tmp_path, capsys, monkeypatch):
    made = tmp_path / "made"
    argv = [
        "ppl",
        "--model",
        "tiny:llama",
        "--site",
        "attn",
        "--s-perp",
        "0",
        "--tokens",
        "128",
        "--context",
        "64",
        "--threads",
        "1",
        "--out",
        str(made),
    ]
    assert main(argv) == 0
    assert f"provenance: {made / 'provenance.jsonl'}" in capsys.readouterr().out
    (line,) = read(made)
    assert line["argv"] == argv and line["settings"]["s_perp"] == 0.0 and line["identities"][0]["model"] == "tiny:llama"
    assert line["git"]["commit"] is None or len(line["git"]["commit"]) == 40
    assert line["machine"]["torch_threads"] == 1  # what --threads set

    reproduce = load_script("reproduce")
    monkeypatch.setattr(reproduce, "rerun", main)  # in-process: no second import of torch
    assert reproduce.main([str(made), "--out", str(tmp_path / "again")]) == 0
    assert "1 table(s) reproduced, 0 differ" in capsys.readouterr().out
    df = pd.read_csv(made / "ppl.csv")
    df.loc[df["site"] == "attn", "ppl"] *= 1.01  # a number no rerun gives
    df.to_csv(made / "ppl.csv", index=False)
    assert reproduce.main([str(made), "--out", str(tmp_path / "third")]) == 1
    assert "DIFFERS  ppl.csv: column 'ppl'" in capsys.readouterr().out
    assert reproduce.main([str(tmp_path / "third" / "nowhere")]) == 2


def test_compare_tables_matches_rows_by_their_settings():
    reproduce = load_script("reproduce")
    old = pd.DataFrame({"model": ["a", "a", "b"], "s": [0, 1, 0], "x": [1.0, 2.0, 3.0], "seconds": [1.0, 1.0, 1.0]})
    assert reproduce.compare_tables(old, old.iloc[[1]].assign(seconds=9.0), rtol=1e-4, atol=0) is None
    assert "values differ" in reproduce.compare_tables(old, old.iloc[[1]].assign(x=2.1), rtol=1e-4, atol=0)
    assert "not in the folder" in reproduce.compare_tables(old, old.iloc[[1]].assign(s=5), rtol=1e-4, atol=0)
    assert reproduce.with_out(["x", "--out", "a", "--y"], "b") == ["x", "--out", "b", "--y"]
    assert reproduce.with_out(["x"], "b") == ["x", "--out", "b"]


def test_version_answers_without_importing_torch():
    code = "import sys; from tlgeo.cli import main; main(['--version']); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "tlgeo" and out[-1] == "False"


def test_a_resumed_run_says_in_its_provenance_what_it_took_back(tmp_path, capsys):
    """One line per invocation; the second, which reads every row back from the first's log, says so."""
    out = tmp_path / "p"
    argv = [
        "patching",
        "--model",
        "tiny:llama",
        "--tasks",
        "induction",
        "--prompts",
        "4",
        "--min-accuracy",
        "0",
        "--layers",
        "0,1",
        "--methods",
        "exact",
        "--components",
        "head",
        "--out",
        str(out),
    ]
    assert main(argv) == 0 and main(argv) == 0
    first, second = read(out)
    assert first["resumed"] == [] and first["date"] <= second["date"]
    assert len(second["resumed"]) == 1 and second["resumed"][0].startswith("resumed 8 rows from")


def test_the_atlas_records_the_budgets_it_ran_with_not_none(tmp_path, monkeypatch):
    import tlgeo.report.atlas as atlas
    from tlgeo.runner.analysis import budget_fields

    monkeypatch.setattr(atlas, "run_atlas", lambda cfg, model=None: None)  # what it records, not what it runs
    out = tmp_path / "a"
    assert main(["atlas", "--model", "tiny:llama", "--patching-prompts", "6", "--out", str(out)]) == 0
    (line,) = read(out)
    budgets = {k.removeprefix("budget__"): v for k, v in line["settings"].items() if k.startswith("budget__")}
    context = "decomposition_context"
    assert set(budgets) == set(budget_fields()) and None not in [budgets[k] for k in ("patching_prompts", context)]
    assert budgets["patching_prompts"] == 6
    assert budgets[context] == budget_fields()[context][1].default  # a default, as the run resolved it


def test_dirty_means_the_code_not_the_results_a_run_rewrites(tmp_path):
    repo = tmp_path / "repo"
    (repo / "results" / "x").mkdir(parents=True)
    (repo / "tlgeo").mkdir()
    (repo / "results" / "x" / "t.csv").write_text("a\n1\n")
    (repo / "tlgeo" / "m.py").write_text("A = 1\n")

    def git(*a):
        subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)

    git("init", "-q")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x", "--allow-empty")
    git("add", "-A")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "y")
    assert git_state(repo)["dirty"] is False
    (repo / "results" / "x" / "t.csv").write_text("a\n2\n")  # a rerun rewriting a committed results folder
    assert git_state(repo)["dirty"] is False
    (repo / "tlgeo" / "m.py").write_text("A = 2\n")
    assert git_state(repo)["dirty"] is True


def test_provenance_records_the_code_a_run_started_with_not_the_tree_at_its_end(tmp_path, monkeypatch):
    import tlgeo.runner.provenance as prov

    monkeypatch.setattr(prov, "_CODE", {})
    states = iter([{"commit": "a" * 40, "dirty": False}, {"commit": "b" * 40, "dirty": True}])
    monkeypatch.setattr(prov, "git_state", lambda repo=None: next(states))
    assert code_state()["commit"] == "a" * 40  # asked when the run starts
    record(tmp_path, ["ppl"])  # written when it ends, after an edit and a commit
    assert read(tmp_path)[0]["git"] == {"commit": "a" * 40, "dirty": False}


def test_reproduce_all_remakes_every_quoted_folder_and_refuses_a_dirty_tree(tmp_path, capsys, monkeypatch):
    import tlgeo.runner.provenance as prov

    made = tmp_path / "results" / "ppl-tiny"
    assert (
        main(
            ["ppl", "--model", "tiny:llama", "--site", "attn", "--tokens", "128", "--context", "64", "--out", str(made)]
        )
        == 0
    )
    doc = tmp_path / "DOC.md"
    doc.write_text("## 1. A section\n<!-- source: results/ppl-tiny/ppl.csv -->\nA number.\n")
    reproduce = load_script("reproduce")
    monkeypatch.setattr(reproduce, "rerun", main)
    monkeypatch.setattr(prov, "_CODE", {"commit": "c" * 40, "dirty": True})
    assert reproduce.main(["--all", "--doc", str(doc)]) == 2
    assert "uncommitted changes outside results/" in capsys.readouterr().err
    monkeypatch.setattr(prov, "_CODE", {"commit": "c" * 40, "dirty": False})
    assert reproduce.main(["--all", "--doc", str(doc), "--dry-run"]) == 0
    assert "$ tlgeo ppl --model tiny:llama" in capsys.readouterr().out
    assert reproduce.main(["--all", "--doc", str(doc), "--replace"]) == 0
    said = capsys.readouterr().out
    assert "1 table(s) reproduced, 0 differ" in said and f"replaced {made}" in said
    (line,) = read(made)  # the folder is the rerun's: one line, this commit's
    assert line["git"]["commit"] == "c" * 40 and sorted(p.name for p in (tmp_path / "results").iterdir()) == [
        "ppl-tiny"
    ]


def test_reproduce_all_resume_leaves_out_the_folders_this_code_made(tmp_path, capsys, monkeypatch):
    import tlgeo.runner.provenance as prov

    repo = tmp_path / "repo"
    (repo / "tlgeo").mkdir(parents=True)
    folder = repo / "results" / "ppl-x"
    folder.mkdir(parents=True)

    def commit(path: Path, text: str) -> str:
        path.write_text(text)
        run = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True, text=True)  # noqa: E731
        run("add", "-A")
        run("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", path.name)
        return run("rev-parse", "HEAD").stdout.strip()

    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    a = commit(repo / "tlgeo" / "m.py", "A = 1\n")
    b = commit(folder / "t.csv", "x\n1\n")  # only results committed since a: the same code
    (repo / "docs").mkdir()
    (repo / "tests").mkdir()
    prose = [
        commit(repo / "RESULTS.md", "rewritten\n"),
        commit(repo / "docs" / "page.md", "cites\n"),
        commit(repo / "tests" / "test_claims.py", "checks\n"),
    ]  # prose and checks make no number
    c = commit(repo / "tlgeo" / "m.py", "A = 2\n")
    reproduce = load_script("reproduce")
    monkeypatch.setattr(reproduce, "ROOT", repo)
    assert reproduce.code_commit(a) == reproduce.code_commit(b) == a and reproduce.code_commit(c) == c
    assert [reproduce.code_commit(p) for p in prose] == [a, a, a]
    assert reproduce.code_commit("f" * 40) is None  # a commit this clone lacks: no code to name
    monkeypatch.setattr(prov, "_CODE", {"commit": a, "dirty": False})
    record(folder, ["ppl", "--model", "tiny:llama", "--out", str(folder)])
    assert reproduce.made_by(folder, a) and not reproduce.made_by(folder, c)
    doc = repo / "DOC.md"
    doc.write_text("<!-- source: results/ppl-x/t.csv -->\n")

    def no_rerun(argv):
        raise AssertionError(f"reran {argv}")

    monkeypatch.setattr(reproduce, "rerun", no_rerun)
    monkeypatch.setattr(prov, "_CODE", {"commit": b, "dirty": False})  # a later session, results committed since
    assert reproduce.main(["--all", "--doc", str(doc), "--replace", "--resume"]) == 0
    said = capsys.readouterr().out
    assert f"made by this code, {a[:12]}" in said and "not rerun (--resume)" in said
    monkeypatch.setattr(prov, "_CODE", {"commit": c, "dirty": False})  # the code changed: the folder is stale
    assert reproduce.main(["--all", "--doc", str(doc), "--resume", "--dry-run"]) == 0
    said = capsys.readouterr().out
    assert "made by this code" not in said and "$ tlgeo ppl --model tiny:llama" in said
    monkeypatch.setattr(prov, "_CODE", {"commit": a, "dirty": False})
    record(folder, ["ppl", "--model", "tiny:llama", "--out", str(folder)])
    lines = read(folder)
    lines[-1]["git"]["dirty"] = True  # one line from a tree with changes: the folder is not this code's
    (folder / "provenance.jsonl").write_text("".join(json.dumps(p) + "\n" for p in lines))
    assert not reproduce.made_by(folder, a)


def test_reproduce_all_jobs_reruns_a_folder_after_the_folders_its_commands_read(tmp_path, monkeypatch, capsys):
    """``--jobs N``: N folders at a time, but a folder whose commands read another quoted folder (a model trained
    into it) starts only after that one's rerun ended; one that failed stops the folders that read it, and each
    folder not rerun says why (the folder it reads, or only that a command failed before its turn)."""
    import threading
    import time

    reproduce = load_script("reproduce")
    monkeypatch.setattr(reproduce, "ROOT", tmp_path)
    model, reader, other = (tmp_path / "results" / n for n in ("pair", "dirmag-pair", "ppl"))
    for f, argv in (
        (model, ["train", "--out", "results/pair"]),
        (reader, ["dirmag", "--model", "results/pair/gpt/model"]),
        (other, ["ppl", "--model", "tiny:llama"]),
    ):
        f.mkdir(parents=True)
        record(f, argv)
    folders = [reader, model, other]
    assert reproduce.depends_on(reader, folders) == {model}
    assert reproduce.depends_on(model, folders) == reproduce.depends_on(other, folders) == set()
    events, lock = [], threading.Lock()

    def fake(folder, **kw):
        with lock:
            events.append(("start", folder.name))
        time.sleep(0.2 if folder == model else 0.01)
        with lock:
            events.append(("end", folder.name))
        return (2 if folder.name in fails else 0), f"{folder.name} done\n"

    monkeypatch.setattr(reproduce, "_remake_alone", fake)
    fails: set[str] = set()
    assert reproduce._remake_all(folders, 2, replace=True, rtol=1e-4, atol=1e-6, commit="c") == 0
    assert events.index(("start", "dirmag-pair")) > events.index(("end", "pair"))
    assert {e for e in events if e[0] == "start"} == {("start", n) for n in ("pair", "dirmag-pair", "ppl")}
    events.clear()
    fails = {"pair"}
    assert reproduce._remake_all(folders, 2, replace=True, rtol=1e-4, atol=1e-6, commit="c") == 2
    assert ("start", "dirmag-pair") not in events  # it reads the folder whose rerun failed
    assert "dirmag-pair (it reads results/pair, whose rerun failed)" in capsys.readouterr().err
    events.clear()
    fails = {"ppl"}
    monkeypatch.setattr(reproduce, "depends_on", lambda f, fs: set())  # nothing reads ppl: one job, ppl first
    assert reproduce._remake_all([other, model, reader], 1, replace=True, rtol=1e-4, atol=1e-6, commit="c") == 2
    err = capsys.readouterr().err
    assert "pair (a command failed before its turn)" in err and "whose rerun failed" not in err


def test_provenance_is_recorded_from_one_place():
    """A command and a run from Python end the same way (:func:`tlgeo.runner.provenance.close_run`): the one caller
    of ``record``, and ``record`` and ``record_table`` (a script's measurements) the only writers of a provenance
    file; a second place that writes a provenance line fails here."""
    import ast

    root = Path(__file__).resolve().parents[1] / "tlgeo"
    callers: dict[str, set[str]] = {"record": set(), "close_run": set(), "append_lines": set()}

    def visit(node: ast.AST, where: str, module: str, own_record: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = f"{module}:{child.name}" if isinstance(child, ast.FunctionDef) else where
            if isinstance(child, ast.Call):
                f = child.func
                name = f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)
                if name == "record" and not own_record:
                    name = None  # another module's function of that name (no provenance)
                if name in callers:
                    callers[name].add(where)
            visit(child, inner, module, own_record)

    for path in root.rglob("*.py"):
        tree, module = ast.parse(path.read_text()), path.relative_to(root).as_posix()
        own = module == "runner/provenance.py" or any(
            isinstance(n, ast.ImportFrom)
            and (n.module or "").endswith("provenance")
            and "record" in [a.name for a in n.names]
            for n in ast.walk(tree)
        )
        visit(tree, module, module, own)
    assert callers["record"] == {"runner/provenance.py:close_run"}, callers
    assert callers["close_run"] == {"cli.py:main", "runner/identity.py:wrapped"}, callers
    assert {c for c in callers["append_lines"] if c.startswith("runner/provenance.py")} == {
        "runner/provenance.py:record",
        "runner/provenance.py:record_table",
    }, callers


def test_a_failed_rerun_never_replaces_its_folder(tmp_path, capsys, monkeypatch):
    """A command that fails (e.g. a model whose package is missing) is status 3, not 1 (a table differs): with
    ``--all --replace`` the folder stays as it was, alone or with ``--jobs``."""
    import tlgeo.runner.provenance as prov

    reproduce = load_script("reproduce")
    folder = tmp_path / "results" / "ppl-x"
    folder.mkdir(parents=True)
    (folder / "ppl.csv").write_text("site,ppl\nattn,1.0\n")
    record(folder, ["ppl", "--model", "tiny:llama", "--out", str(folder)])
    before = sorted(p.name for p in folder.iterdir())
    monkeypatch.setattr(reproduce, "rerun", lambda argv: 2)  # the command fails
    assert reproduce.main([str(folder), "--out", str(tmp_path / "again")]) == reproduce.COMMAND_FAILED == 3
    assert "the command failed" in capsys.readouterr().err
    assert reproduce._remake(folder, replace=True, rtol=1e-4, atol=1e-6, commit="c") == 3
    doc = tmp_path / "DOC.md"
    doc.write_text("<!-- source: results/ppl-x/ppl.csv -->\n")
    monkeypatch.setattr(prov, "_CODE", {"commit": "c" * 40, "dirty": False})
    assert reproduce.main(["--all", "--doc", str(doc), "--replace"]) == 3
    assert sorted(p.name for p in folder.iterdir()) == before and (folder / "ppl.csv").read_text().endswith("1.0\n")
    assert reproduce.VOLATILE.search("model_cfg") and not reproduce.VOLATILE.search("model")


def test_reproduce_reruns_a_scripts_table_with_python(tmp_path, capsys):
    """A script's table (``record_table``: its provenance line is the script and its flags) is rerun as ``python
    <script> <flags>`` with the new ``--out``, and its rows' commit and date are not compared."""
    script = tmp_path / "measure.py"
    script.write_text(
        "import sys\n"
        "from tlgeo.runner.provenance import record_table\n"
        "out = sys.argv[sys.argv.index('--out') + 1]\n"
        "record_table(out, 'm', [{'case': 'a', 'value': 2.5}], [sys.argv[0], *sys.argv[1:]])\n"
    )
    made = tmp_path / "made"
    root = Path(__file__).resolve().parents[1]
    assert subprocess.run([sys.executable, str(script), "--out", str(made)], cwd=root).returncode == 0
    (line,) = read(made)
    assert line["made_from"] == "script" and line["argv"][0] == str(script)
    reproduce = load_script("reproduce")
    assert reproduce.main([str(made), "--out", str(tmp_path / "again")]) == 0
    said = capsys.readouterr().out
    assert f"$ python {script}" in said and "1 table(s) reproduced, 0 differ" in said
    assert pd.read_csv(tmp_path / "again" / "m.csv")["value"].tolist() == [2.5]
