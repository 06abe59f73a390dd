"""Reading a sweep file and composing it with Hydra: the YAML read with every failure as one line, the override
syntax parsed, and Hydra's compose API over the sweep file's directory, its `conf/` and the shipped config groups
(`sweeps/conf/`), each composition cached. What orchestrator/sweep/expand.py expands.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from omegaconf import OmegaConf

from orchestrator.cluster.snapshot import REPO
from orchestrator.sweep.spec import _parser
from record.errors import UserError

SHIPPED_CONF = REPO / "sweeps" / "conf"
# Bounds on a sweep document, checked before Hydra or OmegaConf touch it: far above any real sweep (the paper's
# largest file holds a few hundred values, nests 5 levels, and is 3 KB), far below what would stall a login node.
MAX_BYTES = 1024**2
MAX_VALUES = 10_000
MAX_DEPTH = 32


def read_yaml(path: Path) -> Any:
    """The sweep file's YAML, or one UserError saying what is wrong with it and how to fix it: not YAML, missing,
    unreadable (not UTF-8), a syntax error, or a document past the bounds below, checked before anything walks it
    (a few hundred bytes of nested aliases expand to billions of values: Hydra and OmegaConf would copy each)."""
    if path.suffix not in (".yaml", ".yml"):
        raise UserError(f"{path}: a sweep file is YAML (.yaml); see sweeps/ for examples")
    if not path.is_file():
        near = sorted(p.name for p in path.parent.glob("*.yaml")) if path.parent.is_dir() else []
        hint = f"; sweeps in {path.parent}: {', '.join(near)}" if near else "; check the path"
        raise UserError(f"{path}: no such file{hint}")
    if path.stat().st_size > MAX_BYTES:
        raise UserError(f"{path}: {path.stat().st_size:,} bytes; a sweep file is a few KB (at most {MAX_BYTES:,} "
                        f"bytes): give a sweep file, not data")
    try:
        text = path.read_text(encoding="utf-8")
        _check_depth(text, str(path))
        data = yaml.safe_load(text)
    except UnicodeDecodeError as err:
        raise UserError(f"{path}: not UTF-8 text (byte {err.start}: {err.object[err.start:err.start + 4]!r}); "
                        f"save the sweep file as UTF-8") from None
    except OSError as err:
        raise UserError(f"{path}: cannot read it ({err})") from None
    except RecursionError:
        raise UserError(f"{path}: nested deeper than it can be read; a sweep file nests a few levels: fix the "
                        f"brackets") from None
    except ValueError as err:  # PyYAML builds an int from its digits: Python refuses more than 4300 of them
        raise UserError(f"{path}: a number in it is too long to read ({err}); no setting takes a number that "
                        f"size: fix the value") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        what = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UserError(f"{where}: YAML syntax error: {what}; fix the YAML (indentation, quotes, brackets)") \
            from None
    check_size(data, str(path))
    return data


def _check_depth(text: str, where: str) -> None:
    """Refuse nesting past MAX_DEPTH from the parser's events (a loop, where building the document would recurse
    once per level and take seconds to fail on thousands)."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise UserError(f"{where}: nests more than {MAX_DEPTH} levels deep; a sweep file nests a few "
                                f"levels: flatten it")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def check_size(data: Any, where: str) -> None:
    """Refuse a document that expands past MAX_VALUES values (an alias counts each time it is used) or nests past
    MAX_DEPTH levels, or that holds itself (a recursive alias), with the figure; linear in the document's own size:
    each distinct node is measured once."""
    sizes: dict[int, int] = {}

    def size(node: Any, depth: int) -> int:
        if depth > MAX_DEPTH:
            raise UserError(f"{where}: nests more than {MAX_DEPTH} levels deep; a sweep file nests a few levels: "
                            f"flatten it")
        if not isinstance(node, (dict, list)):
            return 1
        if id(node) in sizes:
            if sizes[id(node)] < 0:
                raise UserError(f"{where}: an alias refers to the node that holds it, so the document never ends; "
                                f"remove the recursive alias")
            return sizes[id(node)]
        sizes[id(node)] = -1  # being measured: meeting it again below is a cycle
        children = [*node.keys(), *node.values()] if isinstance(node, dict) else node
        total = 1
        for child in children:
            total += size(child, depth + 1)
            if total > MAX_VALUES:
                raise UserError(f"{where}: expands to more than {MAX_VALUES:,} values (YAML aliases count each "
                                f"time they are used); a sweep file holds hundreds: remove the nested aliases")
        sizes[id(node)] = total
        return total

    size(data, 0)


def search_dirs(path: Path) -> list[Path]:
    dirs = [path.parent.resolve(), path.parent.resolve() / "conf", SHIPPED_CONF]
    return list(dict.fromkeys(d for d in dirs if d.is_dir()))


def parse_overrides(overrides: Sequence[str], problems: list[str]) -> list[Override]:
    parsed = []
    for text in overrides:
        try:
            parsed.append(_parser().parse_override(text))
        except HydraException as err:
            first = (str(err).strip().splitlines() or ["syntax error"])[0].split(" expecting {")[0]
            problems.append(f"override {text!r}: not Hydra override syntax ({first}); "
                            f"write key=value, e.g. kl.beta=0.2, optim.steps=10, model=tiny, kl.beta=0.1,0.3")
    return parsed


class Composer:
    """Hydra's compose API over the sweep file's directory plus the config-group directories."""

    def __init__(self, path: Path, dirs: list[Path]):
        self.path, self.dirs = path, dirs
        quoted = ",".join("'file://" + str(d).replace("\\", "\\\\").replace("'", "\\'") + "'" for d in dirs[1:])
        self.searchpath = f"hydra.searchpath=[{quoted}]"
        self.cache: dict[tuple, dict | str] = {}
        self.stand_ins: list[str] = []  # group=option in place of a file's unknown choice (`stand_in`)

    def __enter__(self) -> Composer:
        self.context = initialize_config_dir(config_dir=str(self.dirs[0]), version_base="1.3")
        self.context.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.context.__exit__(*exc)

    def compose(self, overrides: list[str]) -> dict | str:
        """The composed config as plain (unresolved) values, or a one-line problem."""
        named = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
        key = tuple([*(s for s in self.stand_ins if s.split("=", 1)[0] not in named), *overrides])
        if key not in self.cache:
            try:
                cfg = compose(self.path.stem, overrides=[self.searchpath, *key])
                self.cache[key] = OmegaConf.to_container(cfg, resolve=False)
            except Exception as err:  # noqa: BLE001 - Hydra raises many kinds for one user mistake
                self.cache[key] = _hydra_message(self.path, overrides, err)
        return self.cache[key]


    def stand_in(self, problem: str) -> bool:
        """After the file's own defaults named a config group option that does not exist (`problem`: Hydra's
        "Could not find 'model/tinyy'; valid: ..."), compose from now on with the closest valid option in its place,
        so that the file's other problems are found and listed beside this one. False: no such problem."""
        found = re.search(r"Could not find '([\w.-]+)/([^']+)'; valid: (.+)$", problem)
        if not found or any(s.startswith(f"{found[1]}=") for s in self.stand_ins):
            return False
        options = [o.strip() for o in found[3].split(",")]
        self.stand_ins.append(f"{found[1]}={(difflib.get_close_matches(found[2], options, 1, 0.0) or options)[0]}")
        return True


def _hydra_message(path: Path, overrides: list[str], err: Exception) -> str:
    text = str(err).split("\nConfig search path:")[0].strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    out, options = [], []
    for ln in lines:
        if out and out[-1].startswith("Available options") and ":" not in ln:
            options.append(ln)
        else:
            out.append(ln)
    if options:
        out[-1] = f"valid: {', '.join(options)}"
    what = "; ".join(out) or type(err).__name__
    given = f" with {', '.join(overrides)}" if overrides else ""
    return f"{path}{given}: {what}"
