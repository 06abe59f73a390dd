"""Every name a doc gives (README.md, CONTRIBUTING.md and docs/*.md) exists: a repo path, a dotted module or
`module:function`, a function written beside its file, an `orchestrate` command and its flags, a `make` target, a
relative link and its anchor. A module moved or a flag renamed without its docs fails here, with every stale name at
once (file:line). So does a repo path in a YAML file's comment, and any file of the repo that points outside it (a
contributor has the repo and nothing else: the conventions a comment cites are CONTRIBUTING.md's).

`check_docs(root)` returns (names checked, problems); the planted test below proves each kind is caught."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from pathlib import Path

from tests.unit.test_architecture_doc import defined

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("orchestrator", "trainer", "record", "eval")
TOP_DIRS = (*PACKAGES, "tests", "bench", "slurm", "sweeps", "docs", ".ci", "vendor")
TOP_FILES = ("Makefile", "pyproject.toml", "constraints.txt", "constraints-gpu.txt", "README.md")
SOURCE = re.compile(r"\.(py|ya?ml|sh|md|txt|toml|json|html|png)$")
PLACEHOLDER = re.compile(r"[<>*{}\[\]]|\.\.\.")  # <run_key>, globs, {a,b}, [--opt]: a pattern, not a name
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
SPAN = re.compile(r"(?<!`)`([^`]+?)`(?!`)")
PROSE_PATH = re.compile(r"(?<![\w/.<>-])((?:orchestrator|trainer|record|eval|tests|bench|slurm|sweeps)/[\w/.-]*\w"
                        r"\.(?:py|yaml|sh|md))(?![\w<])")
FILE_THEN_NAME = re.compile(r"`([\w/.-]+\.py)`\s*`([A-Za-z_][\w.]*)`")
DOTTED = re.compile(r"((?:orchestrator|trainer|record|eval)(?:\.\w+)+)(?::([\w./]+))?")
LINK = re.compile(r"\]\(([^)\s]+)\)")
IDENT = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
SHELL_END = {"&&", "||", ";", "|", ">", "2>&1"}

# The tree of `orchestrate`'s parsers as {"flags": [...], "sub": {name: tree}}, built in a child process so that the
# commands' imports (Hydra, torch) stay out of this one: other tests check what `orchestrate status` loads.
CLI_SCRIPT = """
import argparse, json
from orchestrator.cli import build_parser
def walk(p):
    sub = {}
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            sub.update({n: walk(s) for n, s in a.choices.items()})
    return {"flags": sorted(o for a in p._actions for o in a.option_strings), "sub": sub}
print(json.dumps(walk(build_parser())))
"""


@functools.cache
def cli_tree(root: Path = REPO) -> dict:
    out = subprocess.run([sys.executable, "-c", CLI_SCRIPT], cwd=root, capture_output=True, text=True, timeout=60,
                         check=True)
    return json.loads(out.stdout)


def make_targets(root: Path) -> set[str]:
    text = (root / "Makefile").read_text(encoding="utf-8") if (root / "Makefile").is_file() else ""
    found = re.findall(r"^([\w.$() -]+?)\s*:(?!=)", text, re.M)
    return {t for line in found for t in line.split() if not t.startswith(("$", "."))}  # not $(STAMP), .PHONY


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def doc_files(root: Path) -> list[Path]:
    return [p for p in [root / "README.md", root / "CONTRIBUTING.md", *sorted((root / "docs").glob("*.md"))]
            if p.is_file()]


def module_file(root: Path, dotted: list[str]) -> tuple[Path | None, list[str]]:
    """The longest prefix of `dotted` that is a module or package under `root`, and the names after it."""
    for n in range(len(dotted), 0, -1):
        base = root.joinpath(*dotted[:n])
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                return path, dotted[n:]
    return None, dotted


class Checker:
    """Collects (names checked, problems) over the docs of one tree."""

    def __init__(self, root: Path, cli: dict, targets: set[str]):
        self.root, self.cli, self.targets = root, cli, targets
        self.file_names = {p.name for top in TOP_DIRS for p in (root / top).rglob("*.py")}
        self.checked: set[tuple[str, str]] = set()
        self.problems: list[str] = []

    def claim(self, where: str, name: str, ok: bool, why: str) -> None:
        if (where, name) in self.checked:
            return
        self.checked.add((where, name))
        if not ok:
            self.problems.append(f"{where}: {why}")

    def names_in(self, where: str, path: Path, names: list[str]) -> None:
        """Each of `names` (a function, a class, `Class.method`, a test node `Class::test`) is defined in `path`."""
        if not path.is_file() or path.suffix != ".py":
            return
        have = defined(path)
        for name in names:
            name = name.replace("::", ".").split("(")[0]
            if name and not name.isdigit():
                self.claim(where, f"{path}:{name}", name in have,
                           f"`{name}` is not defined in {path.relative_to(self.root)}")

    # --- the kinds of name --------------------------------------------------------------------------------------

    def repo_path(self, where: str, span: str) -> None:
        """A span whose first word is a path into the repo (`a/b.py`, `a/b.py:name`, `a/b.py name`, `a/`)."""
        words = span.split()
        first = words[0].removeprefix("./")
        top = first.split("/")[0]
        if re.fullmatch(r"\w+\.py", first):  # `test_resume.py`: a file of ours, wherever it lives
            self.claim(where, first, first in self.file_names, f"no file {first} in {', '.join(TOP_DIRS)}")
            return
        if not (top in TOP_DIRS and "/" in first or first in TOP_FILES) or PLACEHOLDER.search(first):
            return
        path, _, name = first.partition(":")
        if top == "eval" and not SOURCE.search(path):
            return  # eval/<task>/mean_at_32 is a metric key, eval/step_N/ a run directory's folder
        self.claim(where, path, (self.root / path).exists(), f"{path} does not exist")
        names = [n for n in name.lstrip(":").split("/") if n]
        if path.endswith(".py") and len(words) == 2 and IDENT.fullmatch(words[1]):
            names.append(words[1])  # `trainer/run/export.py save_final`
        self.names_in(where, self.root / path, names)

    def dotted(self, where: str, span: str) -> None:
        """`trainer.objective.kl.describe_objective`, `orchestrator.jobs:train_job`, `eval.evaluate.evaluate()`."""
        match = DOTTED.match(span)
        if not match:
            return
        parts, after = match.group(1).split("."), match.group(2)
        if parts[0] == "eval" and len(parts) == 2 and not after:
            return  # eval.seeds, eval.max_tokens: the run config's eval section, not the eval package
        path, rest = module_file(self.root, parts)
        if path is None:
            self.claim(where, match.group(0), False, f"`{match.group(1)}` is no module")
            return
        self.claim(where, str(path), True, "")
        # What follows the module is a name in it, or `Class.method`: `orchestrator.submit.setup_lines` (a module
        # gone) reads as `submit.setup_lines` in orchestrator/__init__.py and fails there.
        names = [".".join(rest)] if rest else []
        self.names_in(where, path, names + [n for n in (after or "").split("/") if n])

    def command(self, where: str, words: list[str]) -> None:
        """`orchestrate <cmd> [<sub>] ... --flag`: the command, its subcommand and each flag exist."""
        tree, said = self.cli, ["orchestrate"]
        for word in words[1:]:
            if word in SHELL_END or word.startswith("#"):
                break
            if tree["sub"] and re.fullmatch(r"[a-z][\w|-]*", word):
                choices = word.split("|")
                for choice in choices:
                    self.claim(where, f"{' '.join(said)} {choice}", choice in tree["sub"],
                               f"`{' '.join(said)} {choice}` is no command; valid: {', '.join(sorted(tree['sub']))}")
                if choices[0] not in tree["sub"]:
                    return
                tree, said = tree["sub"][choices[0]], [*said, choices[0]]
            elif word.startswith("--"):
                flag = word.split("=")[0].strip("[]")
                self.claim(where, f"{' '.join(said)} {flag}", flag in tree["flags"],
                           f"`{' '.join(said)}` takes no {flag}")

    def make(self, where: str, words: list[str]) -> None:
        for word in words[1:]:
            if word in SHELL_END or word.startswith("#"):
                break
            if "=" in word or word.startswith("-"):
                continue
            self.claim(where, f"make {word}", word in self.targets, f"`make {word}`: no such target in the Makefile")

    def shell(self, where: str, line: str) -> None:
        words = line.replace("\\|", "|").split()
        while words and re.fullmatch(r"\w+=\S*", words[0]):
            words = words[1:]  # HF_HOME=/x orchestrate ...
        if words and (words[0] == "orchestrate" or words[0].endswith("/bin/orchestrate")):
            self.command(where, words)
        elif words and words[0] == "make":
            self.make(where, words)

    def link(self, where: str, doc: Path, target: str) -> None:
        if re.match(r"[a-z]+:", target):
            return  # http:, mailto:
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        self.claim(where, str(path), path.exists(), f"link to {file}: no such file")
        if anchor and path.is_file() and path.suffix == ".md":
            heads = {slug(h) for h in re.findall(r"^#+ (.+)$", FENCE.sub("", path.read_text(encoding="utf-8")), re.M)}
            self.claim(where, f"{path}#{anchor}", anchor in heads, f"link to {target}: no such heading")

    # --- one doc ---------------------------------------------------------------------------------------------------

    def doc(self, doc: Path) -> None:
        text = doc.read_text(encoding="utf-8")
        name = doc.relative_to(self.root)

        def line_of(pos: int, within: str | None = None) -> str:
            return f"{name}:{(text if within is None else within).count(chr(10), 0, pos) + 1}"

        for fence in FENCE.finditer(text):  # command lines of code blocks: `orchestrate ...`, `make ...`
            first = text.count("\n", 0, fence.start()) + 1
            for i, line in enumerate(fence.group(0).splitlines()):
                self.shell(f"{name}:{first + i}", line.strip())
        prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
        for span in SPAN.finditer(prose):
            body = span.group(1).replace("\n", " ").replace("\\|", "|").strip()
            if not body or "\n\n" in span.group(1):
                continue
            where = line_of(span.start(), prose)
            self.repo_path(where, body)
            self.dotted(where, body)
            self.shell(where, body)
        for pair in FILE_THEN_NAME.finditer(prose):
            self.names_in(line_of(pair.start(), prose), self.root / pair.group(1), [pair.group(2)])
        for path in PROSE_PATH.finditer(text):
            self.claim(line_of(path.start()), path.group(1), (self.root / path.group(1)).exists(),
                       f"{path.group(1)} does not exist")
        for link in LINK.finditer(prose):
            self.link(line_of(link.start(), prose), doc, link.group(1))


def check_docs(root: Path = REPO, cli: dict | None = None) -> tuple[int, list[str]]:
    """(how many names the docs give were checked, every problem as `file:line: what`)."""
    checker = Checker(root, cli if cli is not None else cli_tree(root), make_targets(root))
    for doc in doc_files(root):
        checker.doc(doc)
    return len(checker.checked), sorted(checker.problems, key=place)


def place(problem: str) -> tuple[str, int]:
    """`docs/x.md:12: ...` -> ("docs/x.md", 12): problems in the order of the docs' lines."""
    file, line, _ = problem.split(":", 2)
    return file, int(line)


def test_every_name_in_the_docs_exists():
    checked, problems = check_docs()
    print(f"{checked} names checked in {len(doc_files(REPO))} docs")
    assert checked > 500, f"only {checked} names checked: the extraction broke"
    assert not problems, f"{len(problems)} of {checked} names the docs give are not in the code:\n" + \
        "\n".join(problems)


def test_the_checker_catches_each_kind_of_stale_name(tmp_path):
    (tmp_path / "trainer" / "run").mkdir(parents=True)
    (tmp_path / "trainer" / "run" / "preempt.py").write_text("def install():\n    pass\n")
    (tmp_path / "trainer" / "__init__.py").write_text("")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## The ledger: `<sweep dir>/ledger/`\n")
    (tmp_path / "Makefile").write_text(".PHONY: test\ntest: setup\n\tpytest\n")
    cli = {"flags": ["-h"], "sub": {"sweep": {"flags": ["--dry-run"], "sub": {}},
                                    "tracking": {"flags": [], "sub": {"up": {"flags": ["--host"], "sub": {}}}}}}
    good = ("`trainer/run/preempt.py` `install`, `trainer.run.preempt.install`, `orchestrate sweep --dry-run`, "
            "`orchestrate tracking up --host`, `make test`, [l](docs/other.md#the-ledger-sweep-dirledger), "
            "`eval/<task>/mean_at_32`, `eval.seeds`, `ledger/<run_key>.json`\n")
    bad = ["`trainer/gone.py`", "prose names trainer/run/gone.py", "`trainer/run/preempt.py:uninstall`",
           "`trainer/run/preempt.py` `handler`", "`trainer.run.gone`", "`trainer.run.preempt:handler`",
           "`trainer/run/preempt.py handler`", "`eval.gone.evaluate`", "`test_gone.py`",
           "`orchestrate swept X`", "`orchestrate sweep --dry`", "`orchestrate tracking down`",
           "`orchestrate tracking up --port 1`", "`make tests`", "[l](gone.md)", "[l](docs/other.md#the-ledger)",
           "```bash\norchestrate sweep --wet x.yaml\n```"]
    (tmp_path / "README.md").write_text(good + "\n".join(bad) + "\n")
    checked, problems = check_docs(tmp_path, cli)
    assert checked >= len(bad) + 8
    assert problems == [
        "README.md:2: trainer/gone.py does not exist",
        "README.md:3: trainer/run/gone.py does not exist",
        "README.md:4: `uninstall` is not defined in trainer/run/preempt.py",
        "README.md:5: `handler` is not defined in trainer/run/preempt.py",
        "README.md:6: `run.gone` is not defined in trainer/__init__.py",  # no trainer/run/__init__.py
        "README.md:7: `handler` is not defined in trainer/run/preempt.py",
        "README.md:8: `handler` is not defined in trainer/run/preempt.py",
        "README.md:9: `eval.gone.evaluate` is no module",
        f"README.md:10: no file test_gone.py in {', '.join(TOP_DIRS)}",
        "README.md:11: `orchestrate swept` is no command; valid: sweep, tracking",
        "README.md:12: `orchestrate sweep` takes no --dry",
        "README.md:13: `orchestrate tracking down` is no command; valid: up",
        "README.md:14: `orchestrate tracking up` takes no --port",
        "README.md:15: `make tests`: no such target in the Makefile",
        "README.md:16: link to gone.md: no such file",
        "README.md:17: link to docs/other.md#the-ledger: no such heading",
        "README.md:19: `orchestrate sweep` takes no --wet",
    ], problems


# What lies outside the repo: a house style or reference notes some checkout once sat beside, an absolute path of one
# machine. Spelled so that this file does not match itself.
OUTSIDE = re.compile(r"STYLE\.md|\.\./shared|shared/referenc[e]|(?<![\w/])referenc[e]/[\w-]+\.md|style-anchor[s]|"
                     r"/wor[k]/")
YAML_COMMENT = re.compile(r"(?:^|\s)#(.*)$")


def repo_files(root: Path) -> list[Path]:
    """The files of the checkout: tracked, and untracked but not ignored (a new file counts before it is added)."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root, capture_output=True,
                         check=True).stdout.decode()
    return [root / name for name in out.split("\0") if name and (root / name).is_file()]


def outside_references(root: Path, files: list[Path]) -> list[str]:
    """`file:line: text` for every line of a text file that points outside the repo."""
    found = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # a binary file
        found += [f"{path.relative_to(root)}:{n}: {m[0]}" for n, line in enumerate(text.splitlines(), 1)
                  for m in OUTSIDE.finditer(line)]
    return found


def stale_yaml_paths(root: Path, files: list[Path]) -> list[str]:
    """`file:line: path` for every repo path a YAML file's comment names that does not exist."""
    found = []
    for path in (p for p in files if p.suffix in (".yaml", ".yml")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            comment = YAML_COMMENT.search(line)
            found += [f"{path.relative_to(root)}:{n}: {m[1]} does not exist"
                      for m in PROSE_PATH.finditer(comment[1] if comment else "") if not (root / m[1]).exists()]
    return found


def test_nothing_in_the_repo_points_outside_it():
    files = repo_files(REPO)
    assert len(files) > 300, f"only {len(files)} files listed: git ls-files broke"
    found = outside_references(REPO, files)
    assert not found, "these point outside the repo (cite CONTRIBUTING.md's rules, or say the fact itself):\n" + \
        "\n".join(found)


def test_every_path_a_yaml_comment_names_exists():
    found = stale_yaml_paths(REPO, repo_files(REPO))
    assert not found, "YAML comments name paths that are gone:\n" + "\n".join(found)


def test_the_outside_and_yaml_checks_catch_their_faults(tmp_path):
    (tmp_path / "trainer" / "tasks").mkdir(parents=True)
    (tmp_path / "trainer" / "tasks" / "tiny.py").write_text("# a module (CONTRIBUTING.md rule 1)\n")
    conf = tmp_path / "sweeps" / "conf" / "x.yaml"
    conf.parent.mkdir(parents=True)
    conf.write_text("# the task (trainer/tasks/tiny.py)\ndataset: tiny   # trainer/tasks.py split\n"
                    "name: 'a#b'\n# see sweeps/gone.yaml\n")
    style = "STYLE" + ".md"
    (tmp_path / "trainer" / "x.py").write_text(f'"""Thin ({style} rule 11).\n\nFacts: ../' + 'shared/notes."""\n')
    files = [conf, tmp_path / "trainer" / "x.py", tmp_path / "trainer" / "tasks" / "tiny.py"]
    assert stale_yaml_paths(tmp_path, files) == ["sweeps/conf/x.yaml:2: trainer/tasks.py does not exist",
                                                 "sweeps/conf/x.yaml:4: sweeps/gone.yaml does not exist"]
    assert outside_references(tmp_path, files) == [f"trainer/x.py:1: {style}", "trainer/x.py:3: ../" + "shared"]
