"""Hostile sweep files, at least 1,000 of them, each refused with one ConfigError or UserError (never another
exception, never a hang) with nothing written: non-finite numbers in every numeric field (of the run config, the
sweep header and the Slurm profile), YAML alias bombs, deep nesting, huge and unicode keys, bytes that are not
UTF-8, and path-like names in the fields that name a file or a directory. docs/reliability.md gives the classes and
the counts; the slowest refusal is printed (`-s`).

The per-case limit is a guard against a hang, not a speed test: the refusals take milliseconds (the timing is
measured, not asserted, in what this prints).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from orchestrator.sweep.compose import MAX_VALUES
from orchestrator.sweep.expand import load_sweep
from record.errors import ConfigError, UserError
from record.identity.fields import FIELDS

# One xdist worker runs the whole module: its last test adds up what every class before it counted in SEEN.
pytestmark = pytest.mark.xdist_group("test_sweep_hostile")

SMOKE = Path(__file__).resolve().parents[2] / "sweeps" / "smoke.yaml"
TEXT = SMOKE.read_text()
VALID = yaml.safe_load(TEXT)
HANG_S = 30.0  # a hang fails here instead of stalling CI; the slowest refusal, a bomb just small enough to read,
# took 10.4 s in a parallel `make test` beside a busy loop, where a 10 s bound failed a correct refusal
SEEN: Counter = Counter()  # cases run, by class
SLOWEST: dict[str, float] = {}  # class -> its slowest refusal, in seconds
NON_FINITE = ("inf", "-inf", "nan", "1e400", "-1e400")
PROFILE_NUMBERS = ("nodes", "gpus_per_node", "tasks_per_node", "cpus_per_task", "mem_gb", "time_min",
                   "signal_delay_s", "max_array_size", "array_parallelism")


def outcome(kind: str, tmp: Path, text: str | bytes | None = None, overrides: tuple[str, ...] = ()):
    """Load one sweep in an empty directory; the error it was refused with (None: it loaded). Nothing may be
    written beside the file, and nothing but ConfigError / UserError may come out."""
    path = tmp / f"case-{sum(SEEN.values())}.yaml"
    if text is None:
        text = TEXT
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    before, cwd = sorted(tmp.iterdir()), os.getcwd()
    os.chdir(tmp)
    start = time.monotonic()
    try:
        load_sweep(path, overrides)
        error = None
    except (ConfigError, UserError) as err:
        assert str(err).strip() and "Traceback" not in str(err)
        error = err
    finally:
        took = time.monotonic() - start
        os.chdir(cwd)
    SEEN[kind] += 1
    SLOWEST[kind] = max(SLOWEST.get(kind, 0.0), took)
    assert took < HANG_S, f"{kind}: {took:.1f} s"
    assert sorted(tmp.iterdir()) == before, "loading a sweep wrote files"
    path.unlink()
    return error


def leaves(node, prefix=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaves(value, (*prefix, str(key)))
    else:
        yield ".".join(prefix), node


RUN_FIELDS = sorted({key for key, _ in leaves(load_sweep(SMOKE).cells[0].config.to_dict())}
                    - {"tracking.tracking_uri"})  # the tracking URI is a string any value may spell


@pytest.mark.parametrize("value", NON_FINITE)
@pytest.mark.parametrize("field", RUN_FIELDS)
def test_a_non_finite_number_in_any_run_config_field_is_refused_naming_it(field, value, tmp_path):
    err = outcome("non-finite run config value", tmp_path, overrides=(f"{field}={value}",))
    assert isinstance(err, ConfigError), f"{field}={value} was accepted"
    named = f"override '{field}={value}'" if field == "seed" else f"{field}:"  # seeds come from sweep.seeds
    assert any(named in p for p in err.problems), err.problems


@pytest.mark.parametrize("value", NON_FINITE)
@pytest.mark.parametrize("field", PROFILE_NUMBERS)
def test_a_non_finite_number_in_the_slurm_profile_is_refused_naming_it(field, value, tmp_path):
    err = outcome("non-finite Slurm value", tmp_path, overrides=(f"sweep.slurm.overrides.{field}={value}",))
    assert isinstance(err, ConfigError) and any(f"sweep.slurm.overrides.{field}:" in p for p in err.problems), err


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), "1e400", ".inf", ".nan"])
def test_a_non_finite_seed_is_refused(value, tmp_path):
    data = yaml.safe_load(TEXT)
    data["sweep"]["seeds"] = [0, value]
    assert outcome("non-finite seed", tmp_path, yaml.safe_dump(data)) is not None


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                             HealthCheck.function_scoped_fixture])


@SETTINGS
@given(depth=st.integers(4, 12), width=st.integers(3, 12), at=st.sampled_from(["top", "sweep", "grid", "kl"]))
def test_an_alias_bomb_is_refused_with_the_figure(depth, width, at, tmp_path_factory):
    lines = [f"l0: &l0 [{', '.join(['x'] * width)}]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, depth)]
    indent = {"top": "", "sweep": "  ", "grid": "  ", "kl": "  "}[at]
    block = "\n".join(indent + line for line in lines)
    if at == "top":
        text = f"bomb:\n{indent}  x: 1\n" + TEXT + "\nbombs:\n" + "\n".join("  " + ln for ln in lines) + "\n"
    else:
        text = TEXT + f"\n{'sweep_extra' if at != 'kl' else 'kl_extra'}:\n{block}\n"
    err = outcome("alias bomb", tmp_path_factory.mktemp("bomb"), text)
    if width ** depth > MAX_VALUES:
        assert isinstance(err, UserError) and "expands to more than" in str(err), err
    else:
        assert err is not None  # small enough to read: then refused as the unknown key it is


@SETTINGS
@given(depth=st.integers(33, 400) | st.sampled_from([1000, 5000]), kind=st.sampled_from(["list", "map"]))
def test_deep_nesting_is_refused(depth, kind, tmp_path_factory):
    nested = "[" * depth + "]" * depth if kind == "list" else "{a: " * depth + "1" + "}" * depth
    err = outcome("deep nesting", tmp_path_factory.mktemp("deep"), TEXT + f"\ndeep: {nested}\n")
    assert isinstance(err, UserError) and ("levels deep" in str(err) or "deeper" in str(err)), err


@SETTINGS
@given(key=st.text(min_size=1, max_size=20_000).filter(lambda k: k.strip()), where=st.sampled_from(
    ["top", "kl", "sweep", "grid"]))
def test_huge_and_unicode_keys_are_refused_as_unknown(key, where, tmp_path_factory):
    data = yaml.safe_load(TEXT)
    node = {"top": data, "kl": data["kl"], "sweep": data["sweep"], "grid": data["sweep"]["grid"][0]}[where]
    # a key the run config has (hypothesis found `eval.max_tokens` for a grid) is no hostile key
    assume(key not in node and key not in FIELDS and f"kl.{key}" not in FIELDS)
    node[key] = 1
    err = outcome("huge or unicode key", tmp_path_factory.mktemp("key"), yaml.safe_dump(data, allow_unicode=True))
    assert err is not None


def _decodes(blob: bytes) -> bool:
    try:
        blob.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@SETTINGS
@given(at=st.integers(0, len(TEXT)), junk=st.binary(min_size=1, max_size=8).filter(lambda b: not _decodes(b)))
def test_bytes_that_are_not_utf8_are_refused(at, junk, tmp_path_factory):
    data = TEXT.encode()
    err = outcome("not UTF-8", tmp_path_factory.mktemp("bytes"), data[:at] + junk + data[at:])
    assert isinstance(err, UserError) and "UTF-8" in str(err), err


PATHS = ["../up", "../../etc", "/abs/path", "a/b", "~/home", "", " ", "x" * 300, "nul\x00byte", "new\nline",
         "$(id)", "`id`", "C:\\win", "./.", ".", "..", "-rf", "*", "a b", "é/ü"]


@SETTINGS
@given(field=st.sampled_from(["sweep.name", "sweep.output_root", "sweep.slurm.profile", "model.name_or_path",
                              "data.train_path", "data.val_path", "tracking.tracking_uri"]),
       value=st.sampled_from(PATHS) | st.text(max_size=40))
def test_path_like_names_are_refused_or_kept_as_the_users_own_paths(field, value, tmp_path_factory):
    """A name that becomes a directory or a Slurm job name (sweep.name) never climbs out; the paths a user names
    (output_root, a profile file, the model, data) are refused when no file system could hold them, else kept as
    given: nothing is created by loading either way."""
    data = yaml.safe_load(TEXT)
    keys = field.split(".")
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    err = outcome("path-like name", tmp_path_factory.mktemp("path"), yaml.safe_dump(data, allow_unicode=True))
    if field == "sweep.name" and err is None:
        assert "/" not in value and value not in (".", "..") and "\x00" not in value


def test_the_hostile_sweeps_numbered_at_least_a_thousand():
    """Runs last in this module (pytest keeps file order): the classes above added up, and the slowest refusal."""
    total = sum(SEEN.values())
    print(f"\nhostile sweeps: {total}; by class, how many and the slowest refusal: "
          + ", ".join(f"{k} {n} ({SLOWEST[k]:.2f} s)" for k, n in SEEN.items()))
    if len(SEEN) < 8:
        pytest.skip("run with the whole module to count every class")
    assert total >= 1000, SEEN
