"""Baselines: the base models' own mean@k, evaluated once per sweep beside the trained cells (the paper's Figures
5, 6 and 10 draw base Qwen2.5-7B with and without its chat template, and base Llama-3.1-8B-Instruct with it).

A sweep declares them in its header (read here, `parse_baselines`, for orchestrator/sweep/spec.py), each a model and
eval settings:

    sweep:
      baselines:
        - {model: qwen2.5-7b}                              # the chat template on (eval.chat_template's default)
        - {model: qwen2.5-7b, eval.chat_template: false}

Each is composed like a cell (the sweep file's defaults and values, the command line's fixed overrides), with its
own model and eval settings on top, and resolved in full. Its identity is what its evaluation computes (model,
eval, the prompt budget and tensor parallelism vLLM is given), never the training settings: a sweep that changes
only its training reuses its baselines. Its run directory `<sweep dir>/baselines/<key>/` holds `config.yaml` and
`baseline.json` (record/rundir.py), the marker that tells the evaluation to evaluate `model.name_or_path` itself
(eval/target.py).

A baseline passes every stage of the flow a cell does, so its code is four files, one in each stage that needs it
(orchestrator/__init__.py says why not one folder): this one (declared, read, resolved), launch/baseline_jobs.py
(their ledger, their state in words, the local executor's wait), status/baseline_rows.py (their rows with Slurm's
states) and report/base_models.py (their reference lines and table in the report). A new baseline setting is read
and named here; its column, if it needs one, is status/baseline_rows.py's and report/base_models.py's."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.sweep.config_tree import edit, has_interpolation
from record.display import format_value
from record.errors import ConfigError
from record.identity.run_key import canonical_json
from trainer.config.run import RunConfig

HASH_HEX = 8


@dataclass(frozen=True)
class BaselineEntry:
    """One entry of `sweep.baselines`: its place in the list and its (key, value) pairs, `model` first, then the
    `eval.*` settings in key order, e.g. (("model", "qwen2.5-7b"), ("eval.chat_template", False))."""

    index: int
    settings: tuple[tuple[str, Any], ...]


BASELINE_KEYS = "model (a config group option) and eval.* settings (e.g. eval.chat_template: false)"


def parse_baselines(raw: Any, problems: list[str]) -> tuple[BaselineEntry, ...]:
    """`sweep.baselines`: a list of {model: OPTION, eval.KEY: VALUE, ...}, each one evaluation of a base model.
    Values are plain YAML (a list is one value), not sweep syntax: a baseline is one evaluation, not a grid."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        problems.append(f"sweep.baselines: {raw!r}; give a list of {{model: OPTION, eval.KEY: VALUE}}, e.g. "
                        f"[{{model: qwen2.5-7b}}, {{model: qwen2.5-7b, eval.chat_template: false}}]")
        return ()
    out, seen = [], {}
    for i, entry in enumerate(raw):
        where = f"sweep.baselines[{i}]"
        if not isinstance(entry, Mapping):
            problems.append(f"{where}: {entry!r} is not a mapping; give {{model: OPTION, eval.KEY: VALUE}}")
            continue
        bad = [k for k in entry if not isinstance(k, str) or (k != "model" and not (k.startswith("eval.")
                                                                                    and len(k) > 5))]
        problems += [f"{where}.{k}: unknown key; a baseline sets {BASELINE_KEYS}" for k in bad]
        model = entry.get("model")
        if not isinstance(model, str) or not model:
            problems.append(f"{where}.model: {model!r}; name the model's config group option, e.g. qwen2.5-7b "
                            f"(sweeps/conf/model/)")
        problems += [f"{where}.{k}: {v!r} is a mapping; give the value of one eval setting" for k, v in entry.items()
                     if isinstance(v, Mapping)]
        if bad or not isinstance(model, str) or any(isinstance(v, Mapping) for v in entry.values()):
            continue
        pairs = (("model", model), *sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in entry.items()
                                           if k != "model"))
        same = seen.get(repr(pairs))
        if same is not None:
            problems.append(f"{where}: the same baseline as sweep.baselines[{same}]; give each evaluation once")
            continue
        seen[repr(pairs)] = i
        out.append(BaselineEntry(i, pairs))
    return tuple(out)


@dataclass(frozen=True)
class Baseline:
    """One base-model evaluation: the entry as written, its resolved config, its key (the run dir's name, the
    ledger record's and the MLflow run's run_key) and a readable name."""

    index: int
    key: str
    name: str
    settings: tuple[tuple[str, Any], ...]  # as the sweep file wrote it: ("model", option) first
    config: RunConfig

    @property
    def model(self) -> str:
        return str(self.settings[0][1])

    def description(self) -> dict:
        """What baseline.json and the ledger record carry: the model option and its path, the chat template."""
        return {"key": self.key, "name": self.name, "model": self.model,
                "name_or_path": self.config.model.name_or_path, "chat_template": self.config.eval.chat_template,
                "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in self.settings}}


def identity(config: RunConfig) -> str:
    """sha256 of what the evaluation computes; the training settings and where it logs are left out."""
    data = config.to_dict()
    what = {"model": data["model"], "eval": data["eval"],
            "rollout": {k: data["rollout"][k] for k in ("max_prompt_tokens", "tensor_parallel")}}
    return hashlib.sha256(canonical_json(what).encode()).hexdigest()[:HASH_HEX]


def name_of(model: str, config: RunConfig, settings: tuple[tuple[str, Any], ...]) -> str:
    """base-qwen2.5-7b-ct, base-qwen2.5-7b-no-ct, base-tiny-ct-k8 (list values, e.g. eval.tasks, left out)."""
    parts = ["base", model, "ct" if config.eval.chat_template else "no-ct"]
    parts += [f"{k.rsplit('.', 1)[-1]}{format_value(v)}" for k, v in settings[1:]
              if k != "eval.chat_template" and not isinstance(v, (list, tuple))]
    return "-".join(parts).replace(" ", "").replace("/", "_")


def expand_baselines(entries, bases, problems: list[str]) -> tuple[Baseline, ...]:
    """The sweep header's baseline entries resolved on `bases` (orchestrator/sweep/expand.py `_Bases`); every problem
    into `problems` (one the cells already report is not repeated)."""
    out: dict[str, Baseline] = {}  # by identity: what the evaluation computes
    for entry in entries:
        i, settings = entry.index, entry.settings
        where = f"sweep.baselines[{i}]"
        base = bases.for_model(settings[0][1])
        if isinstance(base, str):
            problems.append(f"{where}.model: {base}")
            continue
        config = _resolve(base, settings[1:], where, problems)
        if config is None:
            continue
        name, same = name_of(settings[0][1], config, settings), identity(config)
        if same in out:
            problems.append(f"{where}: the same evaluation as sweep.baselines[{out[same].index}] once resolved "
                            f"({out[same].name}); give each baseline once")
            continue
        out[same] = Baseline(i, f"{name}-{same}", name, settings, config)
    return tuple(out.values())


# A baseline trains nothing: no KL, whatever the sweep's grid blocks set (the base config alone may hold a beta that
# only a block's placement makes valid).
UNTRAINED = (("kl.placement", "none"), ("kl.beta", 0.0))


def _resolve(base, settings, where: str, problems: list[str]) -> RunConfig | None:
    edits = [*UNTRAINED, *((k, list(v) if isinstance(v, tuple) else v) for k, v in settings)]
    data = base.data
    for key, value in edits:
        data = edit(data, key, value)
    found: list[str] = []
    try:
        if base.paths or any(has_interpolation(v) for _, v in edits):
            data = base.resolve(data, edits)
        return RunConfig.from_dict(data)
    except ConfigError as err:
        found = err.problems
    except (ValueError, TypeError) as err:
        found = [f"interpolation: {str(err).splitlines()[0]}"]
    problems += [f"{where}: {p}" for p in found if not any(p in q for q in problems)]
    return None
