"""The layers hold (docs/architecture.md): record/ imports none of the project's packages, trainer/ and eval/ never
import orchestrator/, trainer/ never imports eval/, nothing re-exports; and the login node's commands stay light
(what a fresh interpreter has loaded after importing them).

The arrows are read from every import statement, the ones inside functions included: a lazy import is still an
arrow, and lazy imports are how the old cycles hid.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("record", "trainer", "eval", "orchestrator")
# package -> the project packages it may import (besides itself)
ALLOWED = {"record": set(), "trainer": {"record"}, "eval": {"record", "trainer"},
           "orchestrator": {"record", "trainer", "eval"}}
HEAVY = ("hydra", "omegaconf", "torch", "mlflow", "deepspeed", "transformers", "vllm", "lm_eval", "matplotlib")


def _imports(path: Path, root: Path = REPO) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in a module, relative ones resolved."""
    module = ".".join(path.relative_to(root).with_suffix("").parts)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            name = node.module or ""
            if node.level:
                base = module.split(".")[: -node.level]
                name = ".".join([*base, name] if name else base)
            found.append((node.lineno, name))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return found


def _modules(package: str, root: Path = REPO) -> list[Path]:
    return sorted((root / package).rglob("*.py"))


def _wrong_arrows(package: str, root: Path = REPO) -> list[str]:
    wrong = []
    for path in _modules(package, root):
        for line, name in _imports(path, root):
            top = name.split(".")[0]
            if top in PACKAGES and top != package and top not in ALLOWED[package]:
                wrong.append(f"{path.relative_to(root)}:{line} imports {name}")
    return wrong


@pytest.mark.parametrize("package", PACKAGES)
def test_every_import_points_down_the_layers(package):
    wrong = _wrong_arrows(package)
    may = sorted(ALLOWED[package]) or "nothing of ours"
    assert not wrong, f"{package}/ may import only {may}:\n" + "\n".join(wrong)


def test_no_module_re_exports_what_it_imports():
    shims = [f"{p.relative_to(REPO)}:{i}" for package in PACKAGES for p in _modules(package)
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if "noqa: F401" in line]
    assert not shims, "import each name from its home module instead of re-exporting it:\n" + "\n".join(shims)


def test_the_layer_check_sees_a_wrong_arrow(tmp_path):
    """The check above can fail: an import of orchestrator/ inside a trainer/ function, and a relative import that
    climbs out of record/, are both arrows it reports."""
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "bad.py").write_text("def f():\n    from orchestrator.launch.ledger import Ledger\n")
    (tmp_path / "record").mkdir()
    (tmp_path / "record" / "worse.py").write_text("from ..trainer import config\n")
    assert _wrong_arrows("trainer", tmp_path) == ["trainer/bad.py:2 imports orchestrator.launch.ledger"]
    assert _wrong_arrows("record", tmp_path) == ["record/worse.py:1 imports trainer"]


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
