"""Render the task YAMLs of eval/tasks/ for one evaluation: absolute data paths, k repeats, the sampling settings.

The files in eval/tasks/ are templates (a shared `_default_template_yaml` plus one file per task). `render` writes
one standalone YAML per task (the `include:` merged in, as lm-eval merges it: the task's keys win) next to a copy of
`utils.py`, with
    dataset_kwargs.data_files.test  -> <data dir>/<file>, ABSOLUTE: lm-eval hands data_files to `datasets` as they
                                        are, and a relative path resolves against the working directory
    repeats                          -> k
    generation_kwargs                -> eval/backends.py's settings for the backend and the model's stop strings
The rendered directory is what `TaskManager(include_path=...)` reads, and is kept with the results.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import yaml

TASK_DIR = Path(__file__).resolve().parent / "tasks"
TEMPLATE = "_default_template_yaml"
MATH_ANSWERS = ("math", "tiny")  # the families eval.grader grades (eval/answers.py); MMLU and Countdown keep theirs


class FunctionRef(str):
    """A `!function module.name` scalar, kept as text so a rendered file still resolves it next to utils.py."""


class _Loader(yaml.SafeLoader):
    pass


class _Dumper(yaml.SafeDumper):
    pass


_Loader.add_constructor("!function", lambda loader, node: FunctionRef(loader.construct_scalar(node)))
_Dumper.add_representer(FunctionRef, lambda dumper, data: dumper.represent_scalar("!function", str(data)))


def available_tasks(task_dir: Path = TASK_DIR) -> list[str]:
    return sorted(p.stem for p in task_dir.glob("*.yaml"))


def load_task(name: str, task_dir: Path = TASK_DIR) -> dict:
    """The task's config with its include merged (shallow, local keys win), `!function` tags kept as FunctionRef."""
    path = task_dir / f"{name}.yaml"
    if not path.exists():
        raise KeyError(f"unknown eval task {name!r}; valid: {', '.join(available_tasks(task_dir))}")
    cfg = yaml.load(path.read_text(), Loader=_Loader)  # noqa: S506 - a SafeLoader with one extra tag
    include = cfg.pop("include", None)
    if include is None:
        return cfg
    base = yaml.load((task_dir / include).read_text(), Loader=_Loader)  # noqa: S506
    return {**base, **cfg}


# The task files ship with the code and never change under a running process; a sweep asks each cell's tasks (five
# per cell: 50,000 YAML parses for 10,000 cells, minutes, before this cache) and an evaluation each sample's family.
@functools.lru_cache(maxsize=256)
def data_file(name: str, task_dir: Path = TASK_DIR) -> str:
    """The data file a task reads (relative name in the template, e.g. 'math500.jsonl')."""
    return str(load_task(name, task_dir)["dataset_kwargs"]["data_files"]["test"])


@functools.lru_cache(maxsize=256)
def family(name: str, task_dir: Path = TASK_DIR) -> str:
    """The answer family (eval/answers.py) the task is graded with."""
    return str(load_task(name, task_dir)["metadata"]["family"])


def render_task(name: str, data_path: Path, k: int, generation_kwargs: dict, grader: str = "ours",
                task_dir: Path = TASK_DIR) -> dict:
    """The rendered config of one task (pure: no file is written); with a grader other than `ours`, a task with a
    math answer scores through utils.py's `process_<family>_<grader>` (eval.grader)."""
    if k < 1:
        raise ValueError(f"k={k}: mean@k needs at least one sample per problem")
    cfg = load_task(name, task_dir)
    cfg["dataset_kwargs"] = {**cfg.get("dataset_kwargs", {}), "data_files": {"test": str(Path(data_path).resolve())}}
    cfg["repeats"] = k
    cfg["generation_kwargs"] = dict(generation_kwargs)
    if grader != "ours" and cfg["metadata"]["family"] in MATH_ANSWERS:
        cfg["process_results"] = FunctionRef(f"{cfg['process_results']}_{grader}")
    return cfg


def render(tasks: dict[str, Path], out_dir: Path, k: int, generation_kwargs: dict, grader: str = "ours",
           task_dir: Path = TASK_DIR) -> Path:
    """Write `<out_dir>/<task>.yaml` for each task (task -> its data file) and utils.py; return `out_dir`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(task_dir / "utils.py", out_dir / "utils.py")
    for name, data_path in tasks.items():
        cfg = render_task(name, data_path, k, generation_kwargs, grader, task_dir)
        header = f"# Rendered by eval/taskfiles.py from eval/tasks/{name}.yaml; edit the template, not this file.\n"
        text = yaml.dump(cfg, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)
        (out_dir / f"{name}.yaml").write_text(header + text)
    return out_dir
