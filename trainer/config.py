"""One dataclass per component, each checked on construction (STYLE.md rule 4).

Every check collects *all* of its problems and raises one `ConfigError` that lists them with the field path,
the bad value and the valid choices, so a sweep with several mistakes is fixed in one pass.
Hydra/OmegaConf stays at the entry point; below it, these plain dataclasses.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import math
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields

ESTIMATORS = ("k1", "k2", "k3")
PLACEMENTS = ("none", "reward", "loss", "reward+loss")
# plain: backpropagate through k_t itself (the paper's "in loss").
# rho:   the companion article's importance-weighted forms rho*k1, sg(rho)*k2, rho*k3 with rho = pi/sg(mu).
LOSS_FORMS = ("plain", "rho")
# sequence: every token gets R - beta * sum_t sg(KL_t) (equation 7, the paper's choice).
# reward_to_go: token t gets R - beta * sum_{s>=t} sg(KL_s) (past tokens add zero in expectation, F.3).
CREDITS = ("sequence", "reward_to_go")
ADVANTAGE_ESTIMATORS = ("rloo", "grpo", "dr_grpo", "none")
# token_mean: divide by the total number of response tokens in the batch (the paper's choice).
AGGREGATIONS = ("token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "seq_mean_token_sum_norm")


class ConfigError(ValueError):
    """A configuration that cannot run. `problems` holds one line per problem, each with its fix."""

    def __init__(self, problems: list[str], where: str = ""):
        self.problems = list(problems)
        head = f"{len(self.problems)} problem(s) in {where or 'config'}:"
        super().__init__("\n".join([head, *(f"  - {p}" for p in self.problems)]))


def _choice(problems: list[str], path: str, value, valid: tuple) -> None:
    if value not in valid:
        problems.append(f"{path}: unknown value {value!r}; valid: {', '.join(map(str, valid))}")


def _non_negative(problems: list[str], path: str, value) -> None:
    if value is None:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
        problems.append(f"{path}: {value!r} is not a number; give a float >= 0")
    elif value < 0:
        problems.append(f"{path}: {value!r} is negative; the KL coefficient must be >= 0")


def raise_if(problems: list[str], where: str) -> None:
    if problems:
        raise ConfigError(problems, where)


@dataclass(frozen=True)
class KLConfig:
    """Which KL estimator, where it enters the objective, and with what coefficient.

    `beta` is the coefficient of every placement in use; `beta_reward` / `beta_loss` override it per placement
    when both are used (reward+loss is unbiased on-policy only when the two are equal).
    """

    estimator: str = "k1"
    placement: str = "none"
    beta: float = 0.0
    beta_reward: float | None = None
    beta_loss: float | None = None
    loss_form: str = "plain"
    credit: str = "sequence"
    # Clamp of the log-ratio log(pi/pi_ref) to [-clamp, clamp]; None (the default) clamps nothing.
    clamp: float | None = None

    def __post_init__(self) -> None:
        raise_if(self.problems("kl"), "kl")

    def problems(self, path: str = "kl") -> list[str]:
        p: list[str] = []
        _choice(p, f"{path}.estimator", self.estimator, ESTIMATORS)
        _choice(p, f"{path}.placement", self.placement, PLACEMENTS)
        _choice(p, f"{path}.loss_form", self.loss_form, LOSS_FORMS)
        _choice(p, f"{path}.credit", self.credit, CREDITS)
        for name in ("beta", "beta_reward", "beta_loss"):
            _non_negative(p, f"{path}.{name}", getattr(self, name))
        if self.clamp is not None and (not isinstance(self.clamp, (int, float)) or not self.clamp > 0):
            p.append(f"{path}.clamp: {self.clamp!r}; give a positive float, or null for no clamp")
        if self.placement not in PLACEMENTS or p:
            return p
        uses_reward, uses_loss = self.uses_reward, self.uses_loss
        if self.placement == "none" and any(
            b not in (None, 0, 0.0) for b in (self.beta, self.beta_reward, self.beta_loss)
        ):
            p.append(f"{path}.beta: placement 'none' adds no KL, so every beta must be 0; "
                     f"choose a placement (reward, loss, reward+loss) or set beta to 0")
        if self.placement != "none" and self.beta_reward_value == 0 and self.beta_loss_value == 0:
            p.append(f"{path}.beta: 0 with placement {self.placement!r} adds no KL; "
                     f"use placement 'none' for beta = 0 (one spelling per run keeps run_keys unique)")
        if self.beta_reward is not None and not uses_reward:
            p.append(f"{path}.beta_reward: set, but placement {self.placement!r} has no reward term; "
                     f"use placement 'reward' or 'reward+loss', or drop beta_reward")
        if self.beta_loss is not None and not uses_loss:
            p.append(f"{path}.beta_loss: set, but placement {self.placement!r} has no loss term; "
                     f"use placement 'loss' or 'reward+loss', or drop beta_loss")
        if self.loss_form != "plain" and not uses_loss:
            p.append(f"{path}.loss_form: {self.loss_form!r} shapes the loss term, but placement "
                     f"{self.placement!r} has none; use loss_form 'plain'")
        if self.credit != "sequence" and not uses_reward:
            p.append(f"{path}.credit: {self.credit!r} shapes the reward term, but placement "
                     f"{self.placement!r} has none; use credit 'sequence'")
        return p

    @property
    def uses_reward(self) -> bool:
        return self.placement in ("reward", "reward+loss")

    @property
    def uses_loss(self) -> bool:
        return self.placement in ("loss", "reward+loss")

    @property
    def beta_reward_value(self) -> float:
        if not self.uses_reward:
            return 0.0
        return float(self.beta if self.beta_reward is None else self.beta_reward)

    @property
    def beta_loss_value(self) -> float:
        if not self.uses_loss:
            return 0.0
        return float(self.beta if self.beta_loss is None else self.beta_loss)


@dataclass(frozen=True)
class AlgorithmConfig:
    """The policy-gradient side: baseline, loss aggregation and the PPO trust region."""

    advantage: str = "rloo"
    aggregation: str = "token_mean"
    group_size: int = 5
    # PPO clip epsilon for off-policy minibatches; None disables clipping (on-policy, ratio == 1).
    clip_eps: float | None = 0.2
    # Normaliser of Dr. GRPO's seq_mean_token_sum_norm: a constant (the maximum response length).
    norm_length: int | None = None
    grpo_eps: float = 1e-6

    def __post_init__(self) -> None:
        raise_if(self.problems("algorithm"), "algorithm")

    def problems(self, path: str = "algorithm") -> list[str]:
        p: list[str] = []
        _choice(p, f"{path}.advantage", self.advantage, ADVANTAGE_ESTIMATORS)
        _choice(p, f"{path}.aggregation", self.aggregation, AGGREGATIONS)
        if not isinstance(self.group_size, int) or isinstance(self.group_size, bool) or self.group_size < 1:
            p.append(f"{path}.group_size: {self.group_size!r}; give an integer >= 1")
        elif self.advantage == "rloo" and self.group_size < 2:
            p.append(f"{path}.group_size: {self.group_size} with advantage 'rloo'; leave-one-out needs >= 2")
        if self.clip_eps is not None and not (isinstance(self.clip_eps, (int, float)) and 0 < self.clip_eps < 1):
            p.append(f"{path}.clip_eps: {self.clip_eps!r}; give a float in (0, 1), or null for no clipping")
        if self.aggregation == "seq_mean_token_sum_norm" and not (
            isinstance(self.norm_length, int) and self.norm_length > 0
        ):
            p.append(f"{path}.norm_length: {self.norm_length!r}; seq_mean_token_sum_norm needs a positive "
                     f"constant (the maximum response length)")
        return p


# --- The run config: one frozen dataclass per component, composed by RunConfig --------------------------
# Defaults are the paper's on-policy setting (section 4.1 and appendix B) where the paper gives a number.

TINY_MODEL = "tiny"  # model.name_or_path of the project's own tiny CPU model (trainer/tiny_model.py)
DTYPES = ("bf16", "fp32", "auto")
DATASETS = ("math", "countdown", "tiny")
ENGINES = ("hf", "vllm")
# The five final-evaluation tasks of 4.1, the held-out Countdown set of 4.2, and the tiny model's splits.
EVAL_TASKS = ("math500", "math_squared", "mmlu_college_physics", "mmlu_college_chemistry",
              "mmlu_college_biology", "countdown", "tiny", "tiny_ood", "math_test")
PAPER_EVAL_TASKS = EVAL_TASKS[:5]


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_num(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _int(p: list[str], path: str, value, low: int = 0, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not _is_int(value) or value < low:
        p.append(f"{path}: {value!r}; give an integer >= {low}" + (", or null" if optional else ""))


def _num(p: list[str], path: str, value, low: float, high: float, low_open: bool = False) -> None:
    ok = _is_num(value) and (value > low if low_open else value >= low) and value <= high
    if not ok:
        bounds = f"{'(' if low_open else '['}{low}, {high}]"
        p.append(f"{path}: {value!r}; give a number in {bounds}")


def _bool(p: list[str], path: str, value) -> None:
    if not isinstance(value, bool):
        p.append(f"{path}: {value!r} is not a boolean; give true or false")


def _str(p: list[str], path: str, value, optional: bool = False, empty: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or (not empty and not value.strip()):
        p.append(f"{path}: {value!r}; give a non-empty string" + (", or null" if optional else ""))


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
        _str(p, f"{path}.name_or_path", self.name_or_path)
        if self.params_b is not None:
            _num(p, f"{path}.params_b", self.params_b, 0, 10_000, low_open=True)
        _bool(p, f"{path}.chat_template", self.chat_template)
        _choice(p, f"{path}.dtype", self.dtype, DTYPES)
        return p

    @property
    def is_tiny(self) -> bool:
        return self.name_or_path == TINY_MODEL


@dataclass(frozen=True)
class DataConfig:
    """Training prompts and the validation split scored every `val_every` steps (0: never)."""

    dataset: str = "math"  # MATH train, 7500 problems
    # Local jsonl files; null: the dataset's own default files (trainer/tasks.py). Relative paths are resolved
    # against the job's working directory, so the same sweep gives the same run_keys on every machine.
    train_path: str | None = None
    val_path: str | None = None
    val_split: str = "test"  # MATH test (5000 problems): the paper's Pass@1 progress metric
    val_every: int = 25
    val_size: int | None = None  # null: the whole split

    def __post_init__(self) -> None:
        raise_if(self.problems("data"), "data")

    def problems(self, path: str = "data") -> list[str]:
        p: list[str] = []
        _choice(p, f"{path}.dataset", self.dataset, DATASETS)
        _str(p, f"{path}.train_path", self.train_path, optional=True)
        _str(p, f"{path}.val_path", self.val_path, optional=True)
        _str(p, f"{path}.val_split", self.val_split)
        _int(p, f"{path}.val_every", self.val_every, 0)
        _int(p, f"{path}.val_size", self.val_size, 1, optional=True)
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

    def __post_init__(self) -> None:
        raise_if(self.problems("rollout"), "rollout")

    def problems(self, path: str = "rollout") -> list[str]:
        p: list[str] = []
        _choice(p, f"{path}.engine", self.engine, ENGINES)
        _num(p, f"{path}.temperature", self.temperature, 0, 10, low_open=True)
        _num(p, f"{path}.top_p", self.top_p, 0, 1, low_open=True)
        _int(p, f"{path}.top_k", self.top_k, 1, optional=True)
        _int(p, f"{path}.max_response_tokens", self.max_response_tokens, 1)
        _int(p, f"{path}.max_prompt_tokens", self.max_prompt_tokens, 1)
        _int(p, f"{path}.async_level", self.async_level, 0)
        _int(p, f"{path}.tensor_parallel", self.tensor_parallel, 1)
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
        _num(p, f"{path}.lr", self.lr, 0, 1, low_open=True)
        _int(p, f"{path}.steps", self.steps, 1)
        _int(p, f"{path}.batch_prompts", self.batch_prompts, 1)
        _int(p, f"{path}.minibatch_prompts", self.minibatch_prompts, 1)
        if self.grad_clip is not None:
            _num(p, f"{path}.grad_clip", self.grad_clip, 0, 1e6, low_open=True)
        _num(p, f"{path}.weight_decay", self.weight_decay, 0, 1)
        _int(p, f"{path}.warmup_steps", self.warmup_steps, 0)
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
        _int(p, f"{path}.every", self.every, 1)
        _int(p, f"{path}.keep_last", self.keep_last, 1)
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

    def __post_init__(self) -> None:
        raise_if(self.problems("eval"), "eval")

    def problems(self, path: str = "eval") -> list[str]:
        p: list[str] = []
        if not isinstance(self.tasks, tuple) or not self.tasks:
            p.append(f"{path}.tasks: {self.tasks!r}; give a non-empty list of: {', '.join(EVAL_TASKS)}")
        else:
            for i, task in enumerate(self.tasks):
                _choice(p, f"{path}.tasks[{i}]", task, EVAL_TASKS)
        _int(p, f"{path}.k", self.k, 1)
        _num(p, f"{path}.temperature", self.temperature, 0, 10)
        _num(p, f"{path}.top_p", self.top_p, 0, 1, low_open=True)
        _int(p, f"{path}.max_tokens", self.max_tokens, 1)
        _bool(p, f"{path}.chat_template", self.chat_template)
        if not isinstance(self.seeds, tuple) or not self.seeds:
            p.append(f"{path}.seeds: {self.seeds!r}; give a non-empty list of integers >= 0")
        else:
            for i, seed in enumerate(self.seeds):
                _int(p, f"{path}.seeds[{i}]", seed, 0)
        return p


@dataclass(frozen=True)
class TrackingConfig:
    """Where the run logs (MLflow). Empty `tracking_uri`: the job's MLFLOW_TRACKING_URI, else the tracking
    module's default; empty `experiment`: the sweep's name. Not in the run_key (orchestrator/identity.py)."""

    tracking_uri: str = ""
    experiment: str = ""

    def __post_init__(self) -> None:
        raise_if(self.problems("tracking"), "tracking")

    def problems(self, path: str = "tracking") -> list[str]:
        p: list[str] = []
        _str(p, f"{path}.tracking_uri", self.tracking_uri, empty=True)
        _str(p, f"{path}.experiment", self.experiment, empty=True)
        return p


def _join(path: str, key) -> str:
    return f"{path}.{key}" if path else str(key)


def _unknown_keys(problems: list[str], path: str, data: Mapping, valid: list[str]) -> None:
    for key in data:
        if key not in valid:
            close = difflib.get_close_matches(str(key), valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"{_join(path, key)}: unknown key{hint}; valid: {', '.join(valid)}")


_SCHEMA: dict[type, tuple[list[str], list[str], dict, str]] = {}


def _schema(cls) -> tuple[list[str], list[str], dict, str]:
    """(field names, required names, each field's conversion, the default `path` of its `problems`) of a
    component dataclass, computed once: expansion builds thousands of configs."""
    if cls not in _SCHEMA:
        names = [f.name for f in fields(cls)]
        required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
        default = inspect.signature(cls.problems).parameters["path"].default
        _SCHEMA[cls] = (names, required, {k: _conversion(h) for k, h in typing.get_type_hints(cls).items()},
                        default)
    return _SCHEMA[cls]


def _conversion(hint) -> str:
    if hint is float or float in typing.get_args(hint):
        return "float"
    return "tuple" if hint is tuple or typing.get_origin(hint) is tuple else ""


def _coerce(conversion: str, value):
    """The only conversions a YAML value needs: 1 -> 1.0 where a float is expected (one spelling per value
    keeps run_keys unique), a list -> a tuple where a tuple is expected; the rest is checked as it is."""
    if conversion == "float" and _is_int(value):
        return float(value)
    if conversion == "tuple" and isinstance(value, list):
        return tuple(value)
    return value


def build(cls, data, path: str, problems: list[str]):
    """`cls(**data)` for a component dataclass, or None after appending every problem (paths under `path`)."""
    names, required, hints, default = _schema(cls)
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        problems.append(f"{path}: {data!r} is not a mapping; give a mapping with keys: {', '.join(names)}")
        return None
    memo = _memo_key(cls, path, data)
    if memo is not None and memo in _BUILT:
        return _BUILT[memo]
    before = len(problems)
    _unknown_keys(problems, path, data, names)
    problems.extend(f"{_join(path, name)}: missing; this key is required"
                    for name in required if name not in data)
    if len(problems) > before:
        return None
    try:
        built = cls(**{k: _coerce(hints[k], v) for k, v in data.items()})
    except ConfigError as err:
        for p in err.problems:  # "<default path>.key: ..." -> "<path>.key: ..."
            rest = p[len(default):] if p.startswith(default) else f": {p}"
            problems.append(path + rest if path else rest.lstrip(".: "))
    except (TypeError, ValueError, AttributeError) as err:  # a check that choked on a junk value
        problems.append(f"{path}: {err}")
    else:
        if memo is not None:
            if len(_BUILT) > 4096:
                _BUILT.clear()
            _BUILT[memo] = built
        return built
    return None


# Frozen components built from equal plain values are equal: a sweep's cells share most of them, so each is
# built (and checked) once. The key holds each value's type too, because True == 1 and 1 == 1.0.
_BUILT: dict[tuple, object] = {}


def _memo_key(cls, path: str, data: Mapping) -> tuple | None:
    try:
        key = (cls, path, *((k, type(v), v) for k, v in data.items()))
        hash(key)
    except TypeError:  # a list or dict value: not worth freezing
        return None
    return key


def _jsonable(value) -> bool:
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(_jsonable(v) for v in value)
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and _jsonable(v) for k, v in value.items())
    return False


@dataclass(frozen=True)
class RunConfig:
    """Everything one training run (one sweep cell) needs, resolved: what `config.yaml` in its run dir holds.

    `collapse` stays a plain mapping here; trainer/collapse.py's CollapseConfig validates it.
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
    seed: int = 0
    collapse: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        raise_if(self.problems(), "run config")

    @staticmethod
    def _scalar_problems(seed, collapse, path: str) -> list[str]:
        p: list[str] = []
        _int(p, _join(path, "seed"), seed, 0)
        if not isinstance(collapse, Mapping) or not _jsonable(collapse):
            p.append(f"{_join(path, 'collapse')}: {collapse!r}; give a mapping of plain values "
                     f"(string keys; numbers, strings, booleans, lists)")
        return p

    def problems(self, path: str = "") -> list[str]:
        p = self._scalar_problems(self.seed, self.collapse, path)
        algo, rollout = self.algorithm, self.rollout
        if algo.aggregation == "seq_mean_token_sum_norm" and algo.norm_length != rollout.max_response_tokens:
            p.append(f"{_join(path, 'algorithm.norm_length')}: {algo.norm_length} differs from "
                     f"rollout.max_response_tokens {rollout.max_response_tokens}; Dr. GRPO divides by the "
                     f"generation budget, so set them equal")
        if self.model.is_tiny and rollout.engine == "vllm":
            p.append(f"{_join(path, 'rollout.engine')}: 'vllm' cannot load the tiny model "
                     f"(model.name_or_path {TINY_MODEL!r}); set rollout.engine=hf")
        if rollout.engine == "hf" and rollout.tensor_parallel != 1:
            p.append(f"{_join(path, 'rollout.tensor_parallel')}: {rollout.tensor_parallel} with engine 'hf'; "
                     f"tensor parallelism is a vLLM setting, so set it to 1 or use rollout.engine=vllm")
        return p

    @classmethod
    def from_dict(cls, data, path: str = "") -> RunConfig:
        """Build the whole tree from plain values; every problem of every component in one ConfigError."""
        where = path or "run config"
        if not isinstance(data, Mapping):
            raise ConfigError([f"{where}: {data!r} is not a mapping of run config sections"], where)
        problems: list[str] = []
        _unknown_keys(problems, path, data, _schema(cls)[0])
        parts = {name: build(comp, data.get(name), _join(path, name), problems)
                 for name, comp in _COMPONENTS.items()}
        seed, collapse = data.get("seed", 0), data.get("collapse", {})
        if problems:
            raise ConfigError(problems + cls._scalar_problems(seed, collapse, path), where)
        try:
            collapse = dict(collapse) if isinstance(collapse, Mapping) else collapse
            return cls(**parts, seed=seed, collapse=collapse)
        except ConfigError as err:
            raise ConfigError([p if not path else f"{path}.{p}" for p in err.problems], where) from None

    def to_dict(self) -> dict:
        """Plain, YAML/JSON-ready values (tuples become lists), every field included."""
        out: dict = {}
        for name in _COMPONENTS:
            out[name] = {k: list(v) if type(v) is tuple else v for k, v in _items(getattr(self, name))}
        out["seed"] = self.seed
        out["collapse"] = _plain(self.collapse)
        return out


@functools.lru_cache(maxsize=4096)
def _items(part) -> tuple:
    """A component's (field, plain value) pairs; cells share components, so each is listed once."""
    return tuple((k, getattr(part, k)) for k in _schema(type(part))[0])  # scalars, or tuples of scalars


def _plain(value):
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


_COMPONENTS = {"model": ModelConfig, "data": DataConfig, "rollout": RolloutConfig, "optim": OptimConfig,
               "checkpoint": CheckpointConfig, "eval": EvalConfig, "tracking": TrackingConfig,
               "kl": KLConfig, "algorithm": AlgorithmConfig}
