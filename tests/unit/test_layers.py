"""The layers hold (docs/architecture.md): record/ imports none of the project's packages, trainer/ and eval/ never
import orchestrator/, trainer/ never imports eval/; inside orchestrator/ the subpackages follow the flow (ORDER);
no two modules import each other, however far round; nothing re-exports; no command imports another; mlflow only
under record/; an import deferred into a function is a heavy one; and the login node's commands stay light (what a
fresh interpreter has loaded after importing them).

The arrows are read from every import statement, the ones inside functions included: a lazy import is still an
arrow, and lazy imports are how the old cycles hid. Imports under `if TYPE_CHECKING:` are annotations, not arrows
at run time: the order of orchestrator's subpackages leaves them out, the circle check does not.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("record", "trainer", "eval", "orchestrator")
# package -> the project packages it may import (besides itself)
ALLOWED = {"record": set(), "trainer": {"record"}, "eval": {"record", "trainer"},
           "orchestrator": {"record", "trainer", "eval"}}
# orchestrator's subpackages in the order of the flow: each imports only those before it (and the top-level helper
# modules, HELPERS). commands/ and cli.py sit above them all.
ORDER = ("claims", "cluster", "sweep", "launch", "preflight", "status", "tracking", "watch", "pipeline", "report")
HELPERS = ("console", "arguments")
# trainer/'s and record/'s folders in the same way, "(top)" standing for the package's own top-level modules: the
# trainer's loop (train.py, batch.py) sits above the folders a job runs and below the login node's analysis, which
# no job imports; record's shared modules (errors, checks, rundir, metric_keys, ...) sit below identity and tracking.
FOLDERS = {"trainer": ("objective", "config", "tasks", "model", "rollout", "run", "(top)", "analysis"),
           "record": ("(top)", "identity", "tracking")}
HEAVY = ("hydra", "omegaconf", "torch", "mlflow", "deepspeed", "transformers", "vllm", "lm_eval", "matplotlib",
         "reasoning_gym", "math_verify", "datasets", "huggingface_hub")


@dataclass(frozen=True)
class Import:
    line: int
    name: str  # the absolute module, or module.name for `from module import name` where name is a module
    deferred: bool  # inside a function
    typing: bool  # under `if TYPE_CHECKING:`
    noqa: bool  # carries `noqa: PLC0415`


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    name = node.module or ""
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - node.level + 1]
        name = ".".join([*base, name] if name else base)
    return name


def imports(path: Path, root: Path = REPO) -> list[Import]:
    """Every import of a module, relative ones resolved; `from pkg import mod` names pkg.mod when mod is a module."""
    module, source = module_name(path, root), path.read_text(encoding="utf-8")
    lines = source.splitlines()
    found: list[Import] = []

    def visit(node: ast.AST, deferred: bool, typing: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                noqa = "PLC0415" in lines[child.lineno - 1]
                if isinstance(child, ast.Import):
                    names = [a.name for a in child.names]
                else:
                    base = _resolve(child, module, path.name == "__init__.py")
                    names = [f"{base}.{a.name}" if _is_module(f"{base}.{a.name}", root) else base
                             for a in child.names]
                found.extend(Import(child.lineno, n, deferred, typing, noqa) for n in dict.fromkeys(names))
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, True, typing)
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                visit(child, deferred, True)
            else:
                visit(child, deferred, typing)

    visit(ast.parse(source), False, False)
    return found


def _is_module(name: str, root: Path) -> bool:
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def modules(package: str, root: Path = REPO) -> list[Path]:
    return sorted((root / package).rglob("*.py"))


def project_graph(root: Path = REPO) -> dict[str, set[str]]:
    """module -> the project's modules it imports (a package's import counts as its __init__)."""
    graph: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in modules(package, root):
            own = module_name(path, root)
            graph[own] = {i.name for i in imports(path, root)
                          if i.name.split(".")[0] in PACKAGES and _is_module(i.name, root) and i.name != own}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted: every import circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def wrong_arrows(package: str, root: Path = REPO) -> list[str]:
    wrong = []
    for path in modules(package, root):
        for i in imports(path, root):
            top = i.name.split(".")[0]
            if top in PACKAGES and top != package and top not in ALLOWED[package]:
                wrong.append(f"{path.relative_to(root)}:{i.line} imports {i.name}")
    return wrong


def backward_arrows(root: Path = REPO) -> list[str]:
    """Imports from one of orchestrator's subpackages into one later in ORDER (or into commands/): the flow
    reversed. Type-only imports are left out."""
    wrong = []
    for path in modules("orchestrator", root):
        parts = path.relative_to(root / "orchestrator").parts
        if len(parts) < 2 or parts[0] not in ORDER:
            continue
        rank = ORDER.index(parts[0])
        for i in imports(path, root):
            target = i.name.split(".")
            if i.typing or target[0] != "orchestrator" or len(target) < 2 or target[1] == parts[0]:
                continue
            if target[1] in HELPERS:
                continue
            if target[1] not in ORDER or ORDER.index(target[1]) > rank:
                wrong.append(f"{path.relative_to(root)}:{i.line} ({parts[0]}/) imports {i.name}")
    return wrong


def folder_arrows(package: str, order: tuple[str, ...], root: Path = REPO) -> list[str]:
    """Imports inside `package` from one of its folders into one later in `order`. Type-only imports included: a
    folder that needs a later one's type holds two ideas."""
    def place(parts: list[str]) -> str:
        return parts[0] if len(parts) > 1 else "(top)"

    wrong = []
    for path in modules(package, root):
        own = place(list(path.relative_to(root / package).parts))
        for i in imports(path, root):
            target = i.name.split(".")
            if target[0] != package or len(target) < 2:
                continue
            theirs = target[1] if (root / package / target[1]).is_dir() else "(top)"
            if theirs != own and (theirs not in order or order.index(theirs) > order.index(own)):
                wrong.append(f"{path.relative_to(root)}:{i.line} ({own}) imports {i.name} ({theirs})")
    return wrong


def command_imports(root: Path = REPO) -> list[str]:
    return [f"{path.relative_to(root)}:{i.line} imports {i.name}" for path in modules("orchestrator/commands", root)
            if path.name != "__init__.py" for i in imports(path, root)
            if i.name.startswith("orchestrator.commands.")]


def re_exports(package: str, root: Path = REPO) -> list[str]:
    """A `noqa: F401` (an import kept only to be imported from here) or an `__all__` naming an imported name."""
    found = []
    for path in modules(package, root):
        source = path.read_text(encoding="utf-8")
        found += [f"{path.relative_to(root)}:{n} noqa: F401" for n, line in enumerate(source.splitlines(), 1)
                  if "noqa: F401" in line]
        tree = ast.parse(source)
        imported = {a.asname or a.name.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, (ast.Import, ast.ImportFrom)) for a in node.names}
        for node in tree.body:
            targets = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
            if "__all__" in targets and isinstance(node.value, (ast.List, ast.Tuple)):
                names = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
                found += [f"{path.relative_to(root)}:{node.lineno} __all__ re-exports {n}" for n in names
                          if n in imported]
    return found


def mlflow_outside_record(root: Path = REPO) -> list[str]:
    return [f"{path.relative_to(root)}:{i.line}" for package in PACKAGES if package != "record"
            for path in modules(package, root) for i in imports(path, root) if i.name.split(".")[0] == "mlflow"]


def deferred(root: Path = REPO) -> list[tuple[str, Import]]:
    """Every import inside a function of the project's packages: (where, the import)."""
    return [(f"{path.relative_to(root)}:{i.line}", i) for package in PACKAGES for path in modules(package, root)
            for i in imports(path, root) if i.deferred]


def loads_heavy(module: str) -> list[str]:
    """The heavy packages a fresh interpreter has loaded after importing `module`."""
    probe = f"import sys, {module}\nprint(' '.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return sorted({name.split(".")[0] for name in done.stdout.split() if name.split(".")[0] in HEAVY})


# --- the rules, on the real tree ----------------------------------------------------------------------------------

@pytest.mark.parametrize("package", PACKAGES)
def test_every_import_points_down_the_layers(package):
    wrong = wrong_arrows(package)
    may = sorted(ALLOWED[package]) or "nothing of ours"
    assert not wrong, f"{package}/ may import only {may}:\n" + "\n".join(wrong)


def test_orchestrators_subpackages_import_only_those_before_them_in_the_flow():
    wrong = backward_arrows()
    assert not wrong, f"orchestrator's subpackages go {' -> '.join(ORDER)}:\n" + "\n".join(wrong)
    present = {p.name for p in (REPO / "orchestrator").iterdir() if (p / "__init__.py").is_file()}
    assert present == {*ORDER, "commands"}, "a new subpackage takes its place in ORDER (and docs/architecture.md)"


@pytest.mark.parametrize("package", sorted(FOLDERS))
def test_trainer_and_record_folders_import_only_those_before_them(package):
    order = FOLDERS[package]
    wrong = folder_arrows(package, order)
    assert not wrong, f"{package}/'s folders go {' -> '.join(order)}:\n" + "\n".join(wrong)
    present = {p.name for p in (REPO / package).iterdir() if (p / "__init__.py").is_file()}
    assert present == set(order) - {"(top)"}, f"a new folder of {package}/ takes its place in FOLDERS"


def test_the_folder_order_check_sees_a_backward_import(tmp_path):
    (tmp_path / "trainer" / "config").mkdir(parents=True)
    (tmp_path / "trainer" / "run").mkdir()
    for init in ("trainer", "trainer/config", "trainer/run"):
        (tmp_path / init / "__init__.py").write_text("")
    (tmp_path / "trainer" / "run" / "preempt.py").write_text("")
    (tmp_path / "trainer" / "train.py").write_text("from trainer.run import preempt\n")
    (tmp_path / "trainer" / "config" / "run.py").write_text("from trainer.run import preempt\nimport trainer.train\n")
    assert folder_arrows("trainer", FOLDERS["trainer"], tmp_path) == [
        "trainer/config/run.py:1 (config) imports trainer.run.preempt (run)",
        "trainer/config/run.py:2 (config) imports trainer.train ((top))"]


def test_no_module_imports_itself_round_a_circle():
    found = circles(project_graph())
    assert not found, "import circles (give the shared part a home of its own):\n" + "\n".join(
        " <-> ".join(c) for c in found)


def test_no_command_imports_another():
    wrong = command_imports()
    assert not wrong, "shared pieces go to the library (orchestrator/arguments.py for arguments):\n" + "\n".join(wrong)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_re_exports_what_it_imports(package):
    found = re_exports(package)
    assert not found, "import each name from its home module instead of re-exporting it:\n" + "\n".join(found)


def test_mlflow_is_imported_only_under_record():
    found = mlflow_outside_record()
    assert not found, "MLflow is record/'s (record/tracking/; why: its __init__.py):\n" + "\n".join(found)


def test_an_import_inside_a_function_is_a_heavy_one_deferred_on_purpose():
    """ruff's PLC0415 keeps imports at the top; the ones left inside a function carry `noqa: PLC0415`, and each
    must be heavy: a package of HEAVY, or a module of ours that loads one (checked in a fresh interpreter)."""
    found = deferred()
    unmarked = [where for where, i in found if not i.noqa]
    assert not unmarked, "imports inside functions without `noqa: PLC0415` (ruff checks this too):\n" + "\n".join(
        unmarked)
    ours = sorted({i.name for _, i in found if i.name.split(".")[0] in PACKAGES})
    light_party = [f"{where} {i.name}" for where, i in found
                   if i.name.split(".")[0] not in PACKAGES and i.name.split(".")[0] not in HEAVY]
    with ThreadPoolExecutor(max_workers=4) as pool:
        heavy = dict(zip(ours, pool.map(loads_heavy, ours)))
    light_ours = [f"{where} {i.name}" for where, i in found if i.name in heavy and not heavy[i.name]]
    assert not light_party + light_ours, "deferred but light: import these at the top of the module:\n" + "\n".join(
        light_party + light_ours)


@pytest.mark.parametrize(("code", "module"), [
    ("import orchestrator.launch.ledger", "orchestrator.launch.ledger"),
    ("import orchestrator.commands.status", "orchestrator.commands.status"),
    # what `orchestrate status ...` builds before it runs: its own parser, not every command's
    ("from orchestrator.cli import build_parser; build_parser('status')", "orchestrator.commands.status"),
])
def test_the_login_node_commands_import_nothing_heavy(code, module):
    """A fresh interpreter runs CODE, then lists what it loaded: none of Hydra, torch, MLflow and the like."""
    probe = f"{code}\nimport sys\nprint(' '.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = done.stdout.split()
    assert module in loaded  # the check reads what it thinks it reads
    heavy = sorted({name for name in loaded if name.split(".")[0] in HEAVY})
    assert not heavy, f"`{code}` loads {', '.join(heavy[:10])}: import them where they are used"


# --- each check can fail: a fake tree with one fault of each kind -------------------------------------------------

def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        for parent in path.relative_to(root).parents:
            if parent != Path(".") and not (root / parent / "__init__.py").exists():
                (root / parent / "__init__.py").write_text("")
    return root


def test_the_layer_check_sees_a_wrong_arrow(tmp_path):
    """An import of orchestrator/ inside a trainer/ function, and a relative import that climbs out of record/,
    are both arrows it reports."""
    _tree(tmp_path, {"trainer/bad.py": "def f():\n    from orchestrator.launch.ledger import Ledger\n",
                     "record/worse.py": "from ..trainer import config\n"})
    assert wrong_arrows("trainer", tmp_path) == ["trainer/bad.py:2 imports orchestrator.launch.ledger"]
    assert wrong_arrows("record", tmp_path) == ["record/worse.py:1 imports trainer"]


def test_the_circle_check_sees_a_circle_through_a_function_and_a_package(tmp_path):
    """a -> b at the top, b -> c inside a function, c -> a through `from pkg import a`: one circle of three; d
    imports a without being imported back: no circle."""
    _tree(tmp_path, {"orchestrator/launch/a.py": "from orchestrator.launch.b import x\n",
                     "orchestrator/launch/b.py": "def x():\n    from orchestrator.launch import c\n",
                     "orchestrator/launch/c.py": "from orchestrator.launch import a\n",
                     "orchestrator/launch/d.py": "import orchestrator.launch.a\n"})
    assert circles(project_graph(tmp_path)) == [
        ["orchestrator.launch.a", "orchestrator.launch.b", "orchestrator.launch.c"]]


def test_the_flow_check_sees_a_backward_arrow_but_not_a_type_only_one(tmp_path):
    _tree(tmp_path, {"orchestrator/sweep/early.py": "from orchestrator.status.cells import rows\n",
                     "orchestrator/cluster/types.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                                      "    from orchestrator.launch.plan import Plan\n",
                     "orchestrator/status/cells.py": "from orchestrator.launch.ledger import Ledger\n",
                     "orchestrator/launch/ledger.py": "", "orchestrator/launch/plan.py": ""})
    assert backward_arrows(tmp_path) == ["orchestrator/sweep/early.py:1 (sweep/) imports orchestrator.status.cells"]


def test_the_command_check_sees_a_command_importing_another(tmp_path):
    _tree(tmp_path, {"orchestrator/commands/report.py": "from orchestrator.commands.status import table\n",
                     "orchestrator/commands/status.py": "from orchestrator.status.tables import table\n",
                     "orchestrator/status/tables.py": ""})
    assert command_imports(tmp_path) == ["orchestrator/commands/report.py:1 imports orchestrator.commands.status"]


def test_the_re_export_check_sees_all_and_noqa(tmp_path):
    _tree(tmp_path, {"orchestrator/launch/ledger.py": "from orchestrator.cluster.query import TERMINAL\n"
                                                      "LIVE = 1\n__all__ = ['TERMINAL', 'LIVE']\n",
                     "orchestrator/launch/shim.py": "from orchestrator.launch.ledger import LIVE  # noqa: F401\n"})
    assert re_exports("orchestrator", tmp_path) == ["orchestrator/launch/ledger.py:3 __all__ re-exports TERMINAL",
                                                    "orchestrator/launch/shim.py:1 noqa: F401"]


def test_the_mlflow_and_deferred_checks_see_their_faults(tmp_path):
    _tree(tmp_path, {"orchestrator/tracking/run.py": "def f():\n    import mlflow  # noqa: PLC0415\n"
                                                     "    import json\n",
                     "record/tracking/tracker.py": "import mlflow\n"})
    assert mlflow_outside_record(tmp_path) == ["orchestrator/tracking/run.py:2"]
    found = {where: (i.name, i.noqa) for where, i in deferred(tmp_path)}
    assert found == {"orchestrator/tracking/run.py:2": ("mlflow", True), "orchestrator/tracking/run.py:3": (
        "json", False)}
