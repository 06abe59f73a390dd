"""One dataclass per component, each checked on construction (CONTRIBUTING.md rule 4).

Every check collects *all* of its problems and raises one `ConfigError` that lists them with the field path,
the bad value and the valid choices, so a sweep with several mistakes is fixed in one pass.
Hydra/OmegaConf stays at the entry point; below it, these plain dataclasses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from record.checks import (
    check_bool,
    check_choice,
    check_int,
    check_num,
    check_str,
    check_unknown_keys,
    join_path,
)
from record.errors import ConfigError, raise_if
from record.plain import build, is_jsonable, items_of, schema_of, to_plain
from trainer.config.graders import DEFAULT as DEFAULT_GRADER
from trainer.config.graders import grader_problems
from trainer.config.memory import MemoryConfig
from trainer.objective.settings import AlgorithmConfig, KLConfig

# --- The run config: one frozen dataclass per component, composed by RunConfig --------------------------
# Defaults are the paper's on-policy setting (section 4.1 and appendix B) where the paper gives a number.

TINY_MODEL = "tiny"  # model.name_or_path of the project's own tiny CPU model (trainer/model/tiny_model.py)
DTYPES = ("bf16", "fp32", "auto")
DATASETS = ("math", "countdown", "tiny", "fractions", "small_sums")
# rollout.engine's choices (trainer/rollout/engine.py builds them); eval.backend takes the same two names (lm-eval's)
ENGINES = ("hf", "vllm")
# The evaluation tasks are eval/tasks/*.yaml (lm-eval task configs): adding one is a file there, and no edit here.
# Read as data, by path: the run config sits below eval/ in the layers and imports nothing from it.
EVAL_TASKS = tuple(sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "eval" / "tasks").glob("*.yaml")))
# The five final-evaluation tasks of 4.1 (the held-out Countdown set of 4.2 and the tiny model's splits are others).
PAPER_EVAL_TASKS = ("math500", "math_squared", "mmlu_college_physics", "mmlu_college_chemistry",
                    "mmlu_college_biology")


@dataclass(frozen=True)
class ModelConfig:
    """The policy (and reference) model; `params_b` (billions of parameters) picks the Slurm resources."""

    name_or_path: str
    params_b: float | None = None
    chat_template: bool = True  # section 4.1: default chat templates in training and evaluation
    dtype: str = "bf16"

    def __post_init__(self) -> None:
        raise_if(self.problems("model"), "model")

    def problems(self, path: str = "model") -> list[str]:
        p: list[str] = []
        check_str(p, f"{path}.name_or_path", self.name_or_path)
        if self.params_b is not None:
            check_num(p, f"{path}.params_b", self.params_b, 0, 10_000, low_open=True)
        check_bool(p, f"{path}.chat_template", self.chat_template)
        check_choice(p, f"{path}.dtype", self.dtype, DTYPES)
        return p

    @property
    def is_tiny(self) -> bool:
        return self.name_or_path == TINY_MODEL


@dataclass(frozen=True)
class DataConfig:
    """Training prompts and the validation split scored every `val_every` steps (0: never)."""

    dataset: str = "math"  # MATH train, 7500 problems
    # Local jsonl files; null: the dataset's own default files (trainer/tasks/tiny.py). Relative paths are resolved
    # against the job's working directory, so the same sweep gives the same run_keys on every machine.
    train_path: str | None = None
    val_path: str | None = None
    val_split: str = "test"  # MATH test (5000 problems): the paper's Pass@1 progress metric
    val_every: int = 25
    val_size: int | None = None  # null: the whole split
    # The training reward's grader (trainer/config/graders.py; docs/evaluation.md "Graders"); Countdown's is
    # reasoning-gym's own, so it takes the default only.
    grader: str = DEFAULT_GRADER

    def __post_init__(self) -> None:
        raise_if(self.problems("data"), "data")

    def problems(self, path: str = "data") -> list[str]:
        p: list[str] = []
        check_choice(p, f"{path}.dataset", self.dataset, DATASETS)
        check_str(p, f"{path}.train_path", self.train_path, optional=True)
        check_str(p, f"{path}.val_path", self.val_path, optional=True)
        check_str(p, f"{path}.val_split", self.val_split)
        check_int(p, f"{path}.val_every", self.val_every, 0)
        check_int(p, f"{path}.val_size", self.val_size, 1, optional=True)
        grader_problems(p, f"{path}.grader", self.grader)
        if self.dataset == "countdown" and self.grader != DEFAULT_GRADER:
            p.append(f"{path}.grader: {self.grader!r} with dataset countdown, which reasoning-gym's scorer grades; "
                     f"set it to {DEFAULT_GRADER!r}")
        return p


@dataclass(frozen=True)
class RolloutConfig:
    """Sampling of the training rollouts. The group size (rollouts per prompt) lives in `algorithm`."""

    engine: str = "vllm"
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = None  # null: off
    max_response_tokens: int = 1024
    max_prompt_tokens: int = 1024
    # Steps the sampling policy may lag the trained one (Prime-RL's async level; 4.2 uses 10). 0: on-policy.
    async_level: int = 0
    tensor_parallel: int = 1
    # vLLM only. The share of the GPU's memory its engine may take (the rest trains); ignored on CPU, where
    # VLLM_CPU_KVCACHE_SPACE bounds it (trainer/rollout/vllm_support.py).
    gpu_memory_utilization: float = 0.3
    # vLLM only: release its weights and KV cache while training. null: where the platform has it (CUDA).
    sleep_mode: bool | None = None

    def __post_init__(self) -> None:
        raise_if(self.problems("rollout"), "rollout")

    def problems(self, path: str = "rollout") -> list[str]:
        p: list[str] = []
        check_choice(p, f"{path}.engine", self.engine, ENGINES)
        check_num(p, f"{path}.temperature", self.temperature, 0, 10, low_open=True)
        check_num(p, f"{path}.top_p", self.top_p, 0, 1, low_open=True)
        check_int(p, f"{path}.top_k", self.top_k, 1, optional=True)
        check_int(p, f"{path}.max_response_tokens", self.max_response_tokens, 1)
        check_int(p, f"{path}.max_prompt_tokens", self.max_prompt_tokens, 1)
        check_int(p, f"{path}.async_level", self.async_level, 0)
        check_int(p, f"{path}.tensor_parallel", self.tensor_parallel, 1)
        check_num(p, f"{path}.gpu_memory_utilization", self.gpu_memory_utilization, 0, 1, low_open=True)
        if self.sleep_mode is not None:
            check_bool(p, f"{path}.sleep_mode", self.sleep_mode)
        return p


@dataclass(frozen=True)
class OptimConfig:
    """The optimiser and the batch. `batch_prompts / minibatch_prompts` policy updates follow each sampled
    batch: 1 is on-policy (section 4.1); more makes every update after the first off-policy (D.2)."""

    lr: float = 1e-6
    steps: int = 250
    batch_prompts: int = 256
    minibatch_prompts: int = 256
    grad_clip: float | None = 1.0  # not in the paper: verl's default; null disables clipping
    weight_decay: float = 0.0  # not in the paper
    warmup_steps: int = 0

    def __post_init__(self) -> None:
        raise_if(self.problems("optim"), "optim")

    def problems(self, path: str = "optim") -> list[str]:
        p: list[str] = []
        check_num(p, f"{path}.lr", self.lr, 0, 1, low_open=True)
        check_int(p, f"{path}.steps", self.steps, 1)
        check_int(p, f"{path}.batch_prompts", self.batch_prompts, 1)
        check_int(p, f"{path}.minibatch_prompts", self.minibatch_prompts, 1)
        if self.grad_clip is not None:
            check_num(p, f"{path}.grad_clip", self.grad_clip, 0, 1e6, low_open=True)
        check_num(p, f"{path}.weight_decay", self.weight_decay, 0, 1)
        check_int(p, f"{path}.warmup_steps", self.warmup_steps, 0)
        if not p and self.batch_prompts % self.minibatch_prompts:
            p.append(f"{path}.minibatch_prompts: {self.minibatch_prompts} does not divide batch_prompts "
                     f"{self.batch_prompts}; give a divisor (batch/minibatch = policy updates per batch)")
        if not p and self.warmup_steps > self.steps:
            p.append(f"{path}.warmup_steps: {self.warmup_steps} is more than steps {self.steps}; lower it")
        return p

    @property
    def updates_per_batch(self) -> int:
        return self.batch_prompts // self.minibatch_prompts


@dataclass(frozen=True)
class CheckpointConfig:
    """Save every `every` steps (and at the end), keep the last `keep_last`: what a requeued job resumes."""

    every: int = 25
    keep_last: int = 2

    def __post_init__(self) -> None:
        raise_if(self.problems("checkpoint"), "checkpoint")

    def problems(self, path: str = "checkpoint") -> list[str]:
        p: list[str] = []
        check_int(p, f"{path}.every", self.every, 1)
        check_int(p, f"{path}.keep_last", self.keep_last, 1)
        return p


@dataclass(frozen=True)
class EvalConfig:
    """Final mean@k evaluation (section 4.1: mean@32, temperature 1.0, top_p 1.0, lm-eval-harness + vLLM)."""

    tasks: tuple[str, ...] = PAPER_EVAL_TASKS
    k: int = 32
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 4096  # not in the paper; long enough that a 1024-token policy is never cut short
    chat_template: bool = True
    # Sampling seeds of the evaluation itself; the 3 seeds of the paper's mean@32 are the training seeds
    # (sweep.seeds), one evaluation each.
    seeds: tuple[int, ...] = (0,)
    # lm-eval's model backend: "vllm" (the paper's), "hf", or null: vLLM where there is a GPU, else hf.
    backend: str | None = None
    # Only the first N problems of each task (a smoke run on a CPU model); null: all of them, as the paper.
    limit: int | None = None
    # At most this many samples (problems x repeats) an lm-eval call: a task is evaluated in shards, each saved as it
    # ends, so a job cut by its time limit resumes at its first unfinished shard (eval/shard_plan.py). null: one call a
    # task.
    shard_samples: int | None = None
    # The grader of every task with a math answer (MATH500, MATH^2, MATH test, the tiny task); MMLU's letter and
    # Countdown's scorer are their own (docs/evaluation.md "Graders").
    grader: str = DEFAULT_GRADER

    def __post_init__(self) -> None:
        raise_if(self.problems("eval"), "eval")

    def problems(self, path: str = "eval") -> list[str]:
        p: list[str] = []
        if not isinstance(self.tasks, tuple) or not self.tasks:
            p.append(f"{path}.tasks: {self.tasks!r}; give a non-empty list of: {', '.join(EVAL_TASKS)}")
        else:
            for i, task in enumerate(self.tasks):
                check_choice(p, f"{path}.tasks[{i}]", task, EVAL_TASKS)
        check_int(p, f"{path}.k", self.k, 1)
        check_num(p, f"{path}.temperature", self.temperature, 0, 10)
        check_num(p, f"{path}.top_p", self.top_p, 0, 1, low_open=True)
        check_int(p, f"{path}.max_tokens", self.max_tokens, 1)
        check_bool(p, f"{path}.chat_template", self.chat_template)
        if not isinstance(self.seeds, tuple) or not self.seeds:
            p.append(f"{path}.seeds: {self.seeds!r}; give a non-empty list of integers >= 0")
        else:
            for i, seed in enumerate(self.seeds):
                check_int(p, f"{path}.seeds[{i}]", seed, 0)
        if self.backend is not None:
            check_choice(p, f"{path}.backend", self.backend, ENGINES)  # the same two names as rollout.engine
        if self.limit is not None:
            check_int(p, f"{path}.limit", self.limit, 1)
        if self.shard_samples is not None:
            check_int(p, f"{path}.shard_samples", self.shard_samples, 1)
        grader_problems(p, f"{path}.grader", self.grader)
        return p


@dataclass(frozen=True)
class TrackingConfig:
    """Where the run logs (MLflow). Empty `tracking_uri`: the job's MLFLOW_TRACKING_URI, else the tracking
    module's default; empty `experiment`: the sweep's name. Not in the run_key (record/identity/run_key.py)."""

    tracking_uri: str = ""
    experiment: str = ""

    def __post_init__(self) -> None:
        raise_if(self.problems("tracking"), "tracking")

    def problems(self, path: str = "tracking") -> list[str]:
        p: list[str] = []
        check_str(p, f"{path}.tracking_uri", self.tracking_uri, empty=True)
        check_str(p, f"{path}.experiment", self.experiment, empty=True)
        return p


@dataclass(frozen=True)
class RunConfig:
    """Everything one training run (one sweep cell) needs, resolved: what `config.yaml` in its run dir holds.

    `collapse` stays a plain mapping here; trainer/run/collapse.py's CollapseConfig validates it.
    """

    model: ModelConfig
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    kl: KLConfig = field(default_factory=KLConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)  # machinery: trainer/config/memory.py
    seed: int = 0
    collapse: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        raise_if(self.problems(), "run config")

    def with_locations(self, **sections) -> RunConfig:
        """This config with its `data`, `model` and/or `tracking` section replaced (where its files are: paths
        resolved at submission, orchestrator/cluster/paths.py), without `problems` run again: it reads none of
        them, and a sweep of 10,000 cells would check each cell twice more (issue 25)."""
        if other := sorted(set(sections) - LOCATIONS):
            raise ValueError(f"with_locations replaces {sorted(LOCATIONS)} only, not {other}")
        new = object.__new__(type(self))  # copy.copy's __reduce_ex__ costs 3x this at 10,000 cells
        new.__dict__.update(self.__dict__, **sections)  # frozen: set as __init__ does, past its __setattr__
        return new

    @staticmethod
    def _scalar_problems(seed, collapse, path: str) -> list[str]:
        p: list[str] = []
        check_int(p, join_path(path, "seed"), seed, 0)
        if not isinstance(collapse, Mapping) or not is_jsonable(collapse):
            p.append(f"{join_path(path, 'collapse')}: {collapse!r}; give a mapping of plain values "
                     f"(string keys; numbers, strings, booleans, lists)")
        return p

    def problems(self, path: str = "") -> list[str]:
        p = self._scalar_problems(self.seed, self.collapse, path)
        algo, rollout = self.algorithm, self.rollout
        if algo.aggregation == "seq_mean_token_sum_norm" and algo.norm_length != rollout.max_response_tokens:
            p.append(f"{join_path(path, 'algorithm.norm_length')}: {algo.norm_length} differs from "
                     f"rollout.max_response_tokens {rollout.max_response_tokens}; Dr. GRPO divides by the "
                     f"generation budget, so set them equal")
        if rollout.engine == "hf" and rollout.tensor_parallel != 1:
            p.append(f"{join_path(path, 'rollout.tensor_parallel')}: {rollout.tensor_parallel} with engine 'hf'; "
                     f"tensor parallelism is a vLLM setting, so set it to 1 or use rollout.engine=vllm")
        return p

    @classmethod
    def from_dict(cls, data, path: str = "", built: dict | None = None) -> RunConfig:
        """Build the whole tree from plain values; every problem of every component in one ConfigError.
        `built`: a cache the caller keeps while it builds many configs from dicts that share their untouched
        sections (a sweep's expansion edits copies only the dicts on an axis' path): a section dict built before
        is its component again, without a look at its values (10,000 cells, issue 25). It holds each dict, so an
        id is never reused while it is cached; the caller must not change a dict once built."""
        where = path or "run config"
        if not isinstance(data, Mapping):
            raise ConfigError([f"{where}: {data!r} is not a mapping of run config sections"], where)
        problems: list[str] = []
        check_unknown_keys(problems, path, data, schema_of(cls)[0])
        parts = {}
        for name, comp in _COMPONENTS.items():
            section = data.get(name)
            held = built.get((name, id(section))) if built is not None and type(section) is dict else None
            if held is not None and held[0] is section:
                parts[name] = held[1]
                continue
            parts[name] = build(comp, section, join_path(path, name), problems)
            if built is not None and type(section) is dict and parts[name] is not None:
                built[(name, id(section))] = (section, parts[name])
        seed, collapse = data.get("seed", 0), data.get("collapse", {})
        if problems:
            raise ConfigError(problems + cls._scalar_problems(seed, collapse, path), where)
        try:
            collapse = dict(collapse) if isinstance(collapse, Mapping) else collapse
            return cls(**parts, seed=seed, collapse=collapse)
        except ConfigError as err:
            raise ConfigError([p if not path else f"{path}.{p}" for p in err.problems], where) from None

    def to_dict(self, shared: dict | None = None) -> dict:
        """Plain, YAML/JSON-ready values (tuples become lists), every field included. `shared`: a cache the
        caller keeps across configs, so a section object many cells hold becomes ONE dict they all hold (10,000
        cells, issue 25): the caller then only reads them (orchestrator/launch/materialise.py)."""
        out: dict = {}
        for name in _COMPONENTS:
            section = getattr(self, name)
            if shared is not None and id(section) in shared:
                out[name] = shared[id(section)][1]
                continue
            out[name] = {k: list(v) if type(v) is tuple else v for k, v in items_of(section)}
            if shared is not None:
                shared[id(section)] = (section, out[name])  # the section held: its id stays its own
        out["seed"] = self.seed
        out["collapse"] = to_plain(self.collapse)
        return out


LOCATIONS = frozenset({"data", "model", "tracking"})  # the sections `RunConfig.problems` never reads
_COMPONENTS = {"model": ModelConfig, "data": DataConfig, "rollout": RolloutConfig, "optim": OptimConfig,
               "checkpoint": CheckpointConfig, "eval": EvalConfig, "tracking": TrackingConfig,
               "kl": KLConfig, "algorithm": AlgorithmConfig, "memory": MemoryConfig}
