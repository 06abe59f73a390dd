"""RunConfig: the whole run config from plain values, every problem of every component in one ConfigError."""

from __future__ import annotations

import pytest

from record.errors import ConfigError
from trainer.config.run import ModelConfig, OptimConfig, RunConfig
from trainer.objective.settings import AlgorithmConfig, KLConfig

MINIMAL = {"model": {"name_or_path": "Qwen/Qwen2.5-7B", "params_b": 7.6}}


def problems_of(data: dict) -> list[str]:
    with pytest.raises(ConfigError) as err:
        RunConfig.from_dict(data)
    return err.value.problems


def test_defaults_are_the_papers_on_policy_setting():
    config = RunConfig.from_dict(MINIMAL)
    assert (config.optim.lr, config.optim.batch_prompts, config.optim.minibatch_prompts) == (1e-6, 256, 256)
    assert config.optim.updates_per_batch == 1
    assert (config.rollout.temperature, config.rollout.top_p, config.rollout.max_response_tokens) == (1.0, 1.0, 1024)
    assert config.rollout.top_k is None and config.rollout.async_level == 0
    assert config.algorithm.group_size == 5 and config.algorithm.advantage == "rloo"
    assert config.eval.k == 32 and len(config.eval.tasks) == 5
    assert config.kl == KLConfig()


def test_to_dict_round_trips_and_is_plain():
    data = {**MINIMAL, "kl": {"estimator": "k3", "placement": "loss", "beta": 1}, "seed": 2,
            "eval": {"tasks": ["math500"]}, "collapse": {"window": 5}}
    config = RunConfig.from_dict(data)
    plain = config.to_dict()
    assert plain["kl"]["beta"] == 1.0 and isinstance(plain["kl"]["beta"], float)  # 1 -> 1.0: one spelling
    assert plain["eval"]["tasks"] == ["math500"] and plain["collapse"] == {"window": 5}
    assert RunConfig.from_dict(plain) == config
    plain["eval"]["tasks"].append("x")  # a caller's edit never reaches the config
    assert config.eval.tasks == ("math500",)


def test_every_problem_of_every_component_at_once():
    problems = problems_of({
        "model": {"name_or_path": "m", "dtype": "fp16"},
        "rollout": {"engine": "sglang", "top_p": 0},
        "optim": {"lr": -1, "steps": 2.5},
        "kl": {"estimator": "k4", "beta": "a lot"},
        "algorithm": {"group_size": 0},
        "eval": {"tasks": ["math500", "gsm8k"]},
        "seed": -1,
    })
    text = "\n".join(problems)
    for expected in ("model.dtype: unknown value 'fp16'; valid: bf16, fp32, auto",
                     "rollout.engine: unknown value 'sglang'; valid: hf, vllm",
                     "rollout.top_p: 0", "optim.lr: -1", "optim.steps: 2.5",
                     "kl.estimator: unknown value 'k4'; valid: k1, k2, k3", "kl.beta: 'a lot' is not a finite number",
                     "algorithm.group_size: 0", "eval.tasks[1]: unknown value 'gsm8k'; valid: countdown, math500",
                     "seed: -1"):
        assert expected in text
    assert len(problems) == 10


def test_unknown_keys_are_refused_at_every_level_with_the_valid_keys():
    problems = problems_of({**MINIMAL, "new": {"key": 1}, "optim": {"stepz": 3}})
    assert any(p.startswith("new: unknown key; valid: model, data, rollout") for p in problems)
    assert any(p.startswith("optim.stepz: unknown key (did you mean 'steps'?); valid: lr, steps") for p in problems)


def test_missing_model_and_wrong_section_types():
    problems = problems_of({"optim": [1, 2], "kl": "k1"})
    assert "model.name_or_path: missing; this key is required" in problems
    assert any(p.startswith("optim: [1, 2] is not a mapping") for p in problems)
    assert any(p.startswith("kl: 'k1' is not a mapping") for p in problems)


def test_not_a_mapping():
    with pytest.raises(ConfigError, match="is not a mapping"):
        RunConfig.from_dict([1, 2])


@pytest.mark.parametrize("data, expected", [
    ({"optim": {"batch_prompts": 256, "minibatch_prompts": 100}}, "optim.minibatch_prompts: 100 does not divide"),
    ({"optim": {"steps": 10, "warmup_steps": 20}}, "optim.warmup_steps: 20 is more than steps 10"),
    ({"algorithm": {"advantage": "dr_grpo", "aggregation": "seq_mean_token_sum_norm", "norm_length": 512}},
     "algorithm.norm_length: 512 differs from rollout.max_response_tokens 1024"),
    ({"rollout": {"engine": "hf", "tensor_parallel": 2}}, "rollout.tensor_parallel: 2 with engine 'hf'"),
    ({"collapse": {"window": float("nan")}}, "collapse:"),
    ({"kl": {"placement": "none", "beta": 0.1}}, "kl.beta: placement 'none' adds no KL"),
])
def test_cross_field_checks(data, expected):
    merged = {**MINIMAL, **data}
    assert any(p.startswith(expected) for p in problems_of(merged)), problems_of(merged)


def test_off_policy_minibatches():
    config = RunConfig.from_dict({**MINIMAL, "optim": {"batch_prompts": 1024, "minibatch_prompts": 256}})
    assert config.optim.updates_per_batch == 4


def test_components_check_themselves_on_construction():
    with pytest.raises(ConfigError, match="model.dtype"):
        ModelConfig(name_or_path="m", dtype="fp8")
    with pytest.raises(ConfigError, match="optim.steps"):
        OptimConfig(steps=0)
    assert ModelConfig("tiny").is_tiny


def test_kl_and_algorithm_configs_keep_their_behaviour():
    assert KLConfig(estimator="k1", placement="reward", beta=0.1).beta_reward_value == 0.1
    with pytest.raises(ConfigError, match="leave-one-out"):
        AlgorithmConfig(group_size=1)


def test_an_integer_beyond_float_range_in_a_float_field_is_a_problem_not_a_traceback():
    with pytest.raises(ConfigError) as err:
        RunConfig.from_dict({"optim": {"lr": 10**400}})
    assert "optim.lr: an integer of about 401 digits is too large for a float" in str(err.value)


def test_sections_shared_between_dicts_are_built_once_and_give_the_configs_built_alone():
    # issue 25: a sweep's cells share their untouched section dicts; with `built` each is built once
    base = RunConfig.from_dict(MINIMAL).to_dict()
    cells = [{**base, "kl": {**base["kl"], "placement": "reward", "beta": b}, "seed": s}
             for b in (0.05, 0.1) for s in (0, 1)]
    built: dict = {}
    shared = [RunConfig.from_dict(c, built=built) for c in cells]
    assert shared == [RunConfig.from_dict(c) for c in cells]
    assert len({id(c.eval) for c in shared}) == 1 and len({id(c.kl) for c in shared}) == 2  # equal values: one
    assert len(built) == 9 + 4  # nine sections shared by every cell, kl one dict per cell
