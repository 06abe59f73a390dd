"""Malformed sweeps (junk values, wrong types, missing keys, garbage YAML, junk overrides) are refused with a
ConfigError or a UserError, never another exception."""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.sweep.expand import Sweep, load_sweep
from record.errors import ConfigError, UserError

SMOKE = Path(__file__).resolve().parents[2] / "sweeps" / "smoke.yaml"
VALID = yaml.safe_load(SMOKE.read_text())
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = (st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats()
           | st.text(max_size=12) | st.sampled_from(["k4", "range(0,3)", "a,b", "${x}", "interval(0,1)", "[1,2]"]))
junk = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)


def paths(node, prefix=()):
    """Every place in a YAML tree a value can be replaced or removed."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        yield (*prefix, key)
        yield from paths(value, (*prefix, key))


PATHS = list(paths(VALID))


def refused_or_loaded(text: str, overrides=()) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sweep.yaml"
        path.write_text(text)
        try:
            assert isinstance(load_sweep(path, overrides), Sweep)
        except (ConfigError, UserError) as err:
            assert str(err).strip()


def mutate(data, where, op, value):
    tree = yaml.safe_load(yaml.safe_dump(data))
    node = tree
    for key in where[:-1]:
        node = node[key]
    if op == "replace":
        node[where[-1]] = value
    elif op == "delete":
        del node[where[-1]]
    elif isinstance(node[where[-1]], dict):
        node[where[-1]][str(value)[:10] or "x"] = value
    return tree


@SETTINGS
@given(where=st.sampled_from(PATHS), op=st.sampled_from(["replace", "delete", "add"]), value=junk)
def test_a_valid_sweep_with_one_junk_edit_is_refused_cleanly(where, op, value):
    refused_or_loaded(yaml.safe_dump(mutate(VALID, where, op, value), allow_unicode=True))


@SETTINGS
@given(document=junk)
def test_junk_documents_are_refused_cleanly(document):
    refused_or_loaded(yaml.safe_dump(document, allow_unicode=True))


@SETTINGS
@given(text=st.text(max_size=200) | st.sampled_from(["sweep: [", "a: b: c", "\t- x", "{", "defaults: 3", "%YAML 9"]))
def test_garbage_yaml_is_refused_cleanly(text):
    refused_or_loaded(text)


@SETTINGS
@given(overrides=st.lists(st.text(max_size=20) | st.sampled_from(
    ["kl.beta=", "=1", "model=", "+=", "~", "sweep.grid=1", "sweep=1", "a.b.c=${x}", "optim.steps=range(0,2)",
     "kl=1", "seed=a", "sweep.seeds=-1", "model=a,b", "hydra.x=1", "kl.beta=glob(*)"]), max_size=3))
def test_junk_overrides_are_refused_cleanly(overrides):
    refused_or_loaded(SMOKE.read_text(), overrides)


HOSTILE = ["local\n#SBATCH --wrap=id", "$(id)", "`id`", "a'b", 'a"b', "a;id", "\x00", "\u202e", "%x", "x" * 2000, "é"]


@SETTINGS
@given(key=st.sampled_from(["partition", "account", "qos", "constraint", "nodes", "mem_gb", "time_min"]),
       value=st.sampled_from(HOSTILE) | st.integers(-10**30, -1) | st.just(10**30) | st.just(float("inf")),
       where=st.sampled_from(["overrides", "name", "output_root"]))
def test_hostile_slurm_values_in_a_sweep_file_are_refused_naming_the_key(key, value, where):
    """The whole path (YAML, Hydra, OmegaConf, the header, the profile): a hostile value is refused naming the
    key the user wrote, and no script is rendered (tests/unit/test_slurm_values.py renders the ones that pass)."""
    data = yaml.safe_load(yaml.safe_dump(VALID))
    if where == "overrides" or not isinstance(value, str):  # a number is a fine name: numbers go to the profile
        data["sweep"]["slurm"]["overrides"] = {key: value}
        path = f"sweep.slurm.overrides.{key}"
    else:
        data["sweep"][where] = value
        path = f"sweep.{where}"
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "sweep.yaml"
        file.write_text(yaml.safe_dump(data, allow_unicode=True))
        try:
            load_sweep(file)
        except ConfigError as err:
            assert any(p.startswith(f"{path}:") for p in err.problems), err.problems
        else:
            assert where == "output_root" and value == "é", value  # the one path-safe value here
