"""docs/architecture.md stays true: every path it names exists, every function (class, constant) it names in a
table is defined in the files of the same row, and every module of the four packages is named on the page, so a
module added, moved or renamed without the page fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"
PACKAGES = ("record", "trainer", "eval", "orchestrator")
PATH = re.compile(r"`((?:record|trainer|eval|orchestrator)/[\w/]*\.py|orchestrator/\w+/)`")  # modules, subpackages
NAME = re.compile(r"`([A-Za-z_][\w.]*)`")


def defined(path: Path) -> set[str]:
    """Top-level functions, classes and assignments of a module, and `Class.method` for each method."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            if isinstance(node, ast.ClassDef):
                names |= {f"{node.name}.{m.name}" for m in node.body
                          if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def table_rows(text: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.startswith("|") and not set(line) <= set("|-: ")]


def problems(doc: str, root: Path) -> list[str]:
    found = [f"{p} does not exist" for p in sorted(set(PATH.findall(doc))) if not (root / p).exists()]
    for row in table_rows(doc):
        files = [root / p for cell in row for p in PATH.findall(cell) if p.endswith(".py") and (root / p).is_file()]
        if not files or len(row) < 2:
            continue
        where = set().union(*(defined(f) for f in files))
        last = row[-1].split(":")[0]  # names before a colon; what follows is prose
        for name in NAME.findall(last):
            if not name.endswith(".py") and "/" not in name and name not in where:
                found.append(f"`{name}` is not defined in {', '.join(str(f.relative_to(root)) for f in files)}")
    return found


def unnamed(doc: str, root: Path) -> list[str]:
    named = set(PATH.findall(doc))
    return [str(p.relative_to(root)) for package in PACKAGES for p in sorted((root / package).rglob("*.py"))
            if p.name != "__init__.py" and "tasks" not in p.parts and str(p.relative_to(root)) not in named]


def test_every_path_and_function_the_page_names_exists():
    found = problems(DOC.read_text(encoding="utf-8"), REPO)
    assert not found, "docs/architecture.md names what is not there:\n" + "\n".join(found)


def test_every_module_is_on_the_page():
    missing = unnamed(DOC.read_text(encoding="utf-8"), REPO)
    assert not missing, "docs/architecture.md does not name these modules (add each where it belongs):\n" + \
        "\n".join(missing)


def test_the_checks_see_a_wrong_page(tmp_path):
    (tmp_path / "trainer" / "objective").mkdir(parents=True)
    (tmp_path / "trainer" / "objective" / "kl.py").write_text("def k1():\n    pass\n\nclass Engine:\n"
                                                              "    def sync(self):\n        pass\n")
    (tmp_path / "trainer" / "extra.py").write_text("")
    doc = ("| concept | file | function |\n|---|---|---|\n"
           "| K1 | `trainer/objective/kl.py` | `k1`, `k2`: prose `x` |\n"
           "| sync | `trainer/objective/kl.py` | `Engine.sync`, `Engine.generate` |\n"
           "| gone | `trainer/gone.py` | `f` |\n")
    assert problems(doc, tmp_path) == ["trainer/gone.py does not exist",
                                       "`k2` is not defined in trainer/objective/kl.py",
                                       "`Engine.generate` is not defined in trainer/objective/kl.py"]
    assert unnamed(doc, tmp_path) == ["trainer/extra.py"]
