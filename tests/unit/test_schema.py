"""Slurm profiles and the sweep header: validated once, every problem at once."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchestrator.cluster.profile import SlurmProfile
from orchestrator.sweep.spec import SweepSpec
from record.errors import ConfigError

PROFILES = Path(__file__).resolve().parents[2] / "slurm" / "profiles"


def profile(name: str) -> SlurmProfile:
    return SlurmProfile.from_dict(yaml.safe_load((PROFILES / f"{name}.yaml").read_text()), name)


def test_a100_profile_is_the_papers_hardware():
    a100 = profile("a100")
    big, small = a100.train_resources(7.6), a100.train_resources(4.0)
    assert (big.nodes, big.gpus_per_node, big.gpus) == (2, 4, 8)  # Qwen2.5-7B, Llama-3.1-8B: 2 nodes x 4 A100
    assert (small.nodes, small.gpus_per_node) == (1, 4)  # Qwen3-4B-Instruct-2507: 1 node x 4 A100
    assert a100.train_resources(None) == big == a100.train_resources(70)  # unknown or larger: the defaults
    assert a100.eval.gpus_per_node >= 1
    assert a100.signal_delay_s == 600  # a 7B step and its ZeRO-3 checkpoint, not submitit's 90 s


def test_local_profile_is_the_dev_cluster():
    local = profile("local")
    res = local.train_resources(0.001)
    assert (local.partition, res.nodes, res.gpus_per_node, res.cpus_per_task) == ("local", 1, 0, 2)
    assert res.mem_gb <= 4 and res.time_min <= 30


def test_profile_problems_all_at_once():
    with pytest.raises(ConfigError) as err:
        SlurmProfile.from_dict({"nodes": 0, "gpus_per_node": -1, "mem_gb": "lots", "queue": "x",
                                "eval": {"time_min": 0}, "by_model_size": [{"nodes": 1}]}, "bad")
    text = str(err.value)
    for expected in ("slurm.queue: unknown key", "slurm.nodes: 0", "slurm.gpus_per_node: -1", "slurm.mem_gb: 'lots'",
                     "slurm.eval.time_min: 0", "slurm.by_model_size[0]", "slurm.partition: missing"):
        assert expected in text
    with pytest.raises(ConfigError) as err:
        SlurmProfile.from_dict({"partition": "p", "signal_delay_s": 70000}, "bad")
    text = str(err.value)
    for expected in ("slurm.signal_delay_s: 70000; Slurm's --signal allows at most 65535 s",):
        assert expected in text


def test_profile_to_dict_round_trips():
    a100 = profile("a100")
    data = a100.to_dict()
    data.pop("name")
    assert SlurmProfile.from_dict(data, "a100") == a100


def spec(data) -> SweepSpec:
    return SweepSpec.from_dict(data, "default-name")


def test_axis_values_in_hydra_sweep_syntax():
    s = spec({"axes": {"kl.beta": "0.05,0.1", "optim.steps": "range(1,4)", "kl.estimator": "choice(k1,k3)",
                       "kl.placement": "reward+loss", "model": "tiny", "eval.tasks": "[math500]", "seed_x": 0}})
    values = {a.key: a.values for a in s.axes}
    assert values == {"kl.beta": (0.05, 0.1), "optim.steps": (1, 2, 3), "kl.estimator": ("k1", "k3"),
                      "kl.placement": ("reward+loss",), "model": ("tiny",), "eval.tasks": (["math500"],),
                      "seed_x": (0,)}
    assert s.name == "default-name" and s.seeds == (0,) and s.grid == ((),)


def test_seeds_as_list_int_or_sweep_string():
    assert spec({"seeds": [0, 1, 2]}).seeds == (0, 1, 2)
    assert spec({"seeds": "range(0,3)"}).seeds == (0, 1, 2)
    assert spec({"seeds": 4}).seeds == (4,)


def test_header_problems_all_at_once():
    with pytest.raises(ConfigError) as err:
        spec({"name": "bad name!", "seeds": [0, 0],
              "grid": [{"kl.beta": [0.1, 0.2]}, {"kl.beta": "interval(0,1)"}, {"+kl.new": 1}, {"seed": "1,2"},
                       {"kl.beta": "0.1,"}, {"kl.beta": 0.2}],
              "slurm": {"profile": "", "partition": "x"}, "axes": {"kl.beta": 0.1}, "color": "red"})
    text = str(err.value)
    for expected in ("sweep.color: unknown key", "sweep.name: 'bad name!'", "sweep.seeds: [0, 0] repeats",
                     "sweep.grid[0].kl.beta: [0.1, 0.2] is a YAML list", "interval_sweep",
                     "sweep.grid[2].+kl.new: axes set existing keys", "sweep.grid[3].seed: cannot be an axis",
                     "sweep.grid[4].kl.beta: 'kl.beta=0.1,' is not Hydra override syntax",
                     "sweep.slurm.partition: unknown key", "sweep.slurm.profile: ''",
                     "sweep.grid[5].kl.beta: also a shared axis"):
        assert expected in text, expected


def test_command_line_axis_replaces_or_adds():
    s = spec({"axes": {"model": "a,b"}, "grid": [{"kl.beta": "0.1,0.2"}, {"kl.placement": "none"}]})
    from orchestrator.sweep.spec import Axis
    pinned = s.with_axis(Axis("kl.beta", (0.3,), "0.3"))
    assert [[a.values for a in block] for block in pinned.grid] == [[(0.3,)], [("none",)]]
    added = s.with_axis(Axis("optim.lr", (1e-6, 1e-5), "1e-6,1e-5"))
    assert [a.key for a in added.axes] == ["model", "optim.lr"]
    assert added.axis_keys() == ["model", "optim.lr", "kl.beta", "kl.placement"]
