"""Sweep values cannot reach an sbatch script as code or directives (issue 13, deliverable 4): every value that
becomes an #SBATCH line, a job name or a log path is held to Slurm's syntax and bounds, and a hostile one is
refused with a message naming the key the user wrote. Nothing here submits: load, validate and render only."""

from __future__ import annotations

import atexit
import shlex
import shutil
import tempfile
import unicodedata
from dataclasses import replace
from pathlib import Path
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from orchestrator.cli import main
from orchestrator.cluster import sbatch_values as sv
from orchestrator.cluster.executor import render_sbatch
from orchestrator.cluster.profile import SlurmProfile, load_profile
from orchestrator.launch.plan import make_plan
from orchestrator.sweep.expand import load_sweep
from orchestrator.sweep.spec import SweepSpec
from record.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "sweeps" / "smoke.yaml"
LOCAL = yaml.safe_load((REPO / "slurm" / "profiles" / "local.yaml").read_text())
EXAMPLE = "local\n#SBATCH --wrap=touch /tmp/pwned"  # the issue's example


def smoke_with(overrides: str, tmp_path: Path) -> Path:
    text = SMOKE.read_text().replace("    profile: local\n", f"    profile: local\n    overrides: {overrides}\n")
    path = tmp_path / "hostile.yaml"
    path.write_text(text)
    return path


# --- the issue's example through the CLI ---------------------------------------------------------------------------

def test_the_issues_example_is_refused_by_validate_naming_the_key(tmp_path, capsys):
    path = smoke_with(yaml.safe_dump({"partition": EXAMPLE}, default_flow_style=True).strip(), tmp_path)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "sweep.slurm.overrides.partition: 'local\\n#SBATCH --wrap=touch /tmp/pwned' has a control character" \
        in err
    assert "Traceback" not in err and err.count("\n  - ") == 1


def test_the_dry_run_of_the_issues_example_prints_no_script(tmp_path, capsys):
    path = smoke_with(yaml.safe_dump({"partition": EXAMPLE}, default_flow_style=True).strip(), tmp_path)
    assert main(["sweep", "--dry-run", str(path)]) == 2
    out, err = capsys.readouterr()
    assert "#SBATCH" not in out and "sweep.slurm.overrides.partition" in err


def test_every_hostile_value_is_one_problem_at_once(tmp_path):
    path = smoke_with('{account: "$(id)", qos: "a`id`", constraint: "a100\'", time_min: -5, nodes: 100000, '
                      'mem_gb: 0.0001, eval: {cpus_per_task: 70000}}', tmp_path)
    with pytest.raises(ConfigError) as err:
        load_sweep(path)
    found = {p.split(":")[0]: p for p in err.value.problems}
    assert sorted(found) == [f"sweep.slurm.overrides.{k}" for k in (
        "account", "constraint", "eval.cpus_per_task", "mem_gb", "nodes", "qos", "time_min")]
    assert "has a shell character '$' (character 1)" in found["sweep.slurm.overrides.account"]
    assert "more nodes than any cluster has: give an integer from 1 to 65533" in found["sweep.slurm.overrides.nodes"]
    assert "--mem=0 as all of a node's memory" in found["sweep.slurm.overrides.mem_gb"]


# --- the checks, one by one ----------------------------------------------------------------------------------------

def problems(check, *args, **kwargs) -> list[str]:
    p: list[str] = []
    check(p, "k", *args, **kwargs)
    return p


@pytest.mark.parametrize("value", ["gpu", "gpu_a100-80gb.long", "a,b"])
def test_slurm_names_that_pass(value):
    assert problems(sv.slurm_name, value, "the partition", several=True) == []


@pytest.mark.parametrize("value, why", [
    ("local\n#SBATCH --wrap=x", "a control character '\\n' (character 6)"), ("a b", "whitespace ' '"),
    ("$(id)", "a shell character '$'"), ("ｇpu", "a non-ASCII character 'ｇ'"), ("a\u202eb", "a control character"),
    ("a,,b", "an empty name"), ("x" * 65, "too long"), ("", ""), (3, ""), ("a,b;", "a shell character ';'")])
def test_slurm_names_that_are_refused(value, why):
    (message,) = problems(sv.slurm_name, value, "the partition", several=True)
    assert message.startswith(f"k: {sv.show(value)}") and why in message and "letters, digits" in message


def test_job_names_paths_and_constraints():
    assert "the character ','" in problems(sv.slurm_name, "a,b", "the account")[0]  # one account, not a list
    assert problems(sv.job_name, "smoke-1.b_2", "x") == []
    assert "has a control character '\\n'" in problems(sv.job_name, "smoke\n", "x")[0]  # `$` of re.match took it
    assert "longer than 64" in problems(sv.job_name, "a" * 65, "x")[0]
    assert problems(sv.file_path, "/scratch/my runs/é_1", "x") == []
    assert "Slurm filename pattern character '%'" in problems(sv.file_path, "runs/%x", "x")[0]
    assert "shell character '\\\\'" in problems(sv.file_path, "runs\\x", "x")[0]
    assert "longer than 1024" in problems(sv.file_path, "a" * 1025, "x")[0]
    assert problems(sv.constraint, "[a100|h100]&ib*2", ) == [] and problems(sv.constraint, None) == []
    assert "shell character ';'" in problems(sv.constraint, "a100;id")[0]


def test_counts_and_memory_have_bounds():
    assert problems(sv.count, 65533, "cpus_per_task") == []
    assert problems(sv.count, 65534, "cpus_per_task") == [
        "k: 65534; Slurm counts CPUs per task in 16 bits: give an integer from 1 to 65533"]
    for bad in (-1, 0, True, 2.0, None, "2", 10**400):
        assert "give an integer from 1 to 525600" in problems(sv.count, bad, "time_min")[0]
    assert problems(sv.memory_gb, 0.5) == [] and problems(sv.memory_gb, 1048576) == []
    for bad in (0, 0.0009, -2, float("nan"), float("inf"), 1048577, True, "4G"):
        assert "a number from 0.001" in problems(sv.memory_gb, bad)[0]


def test_long_values_are_cut_in_messages():
    (message,) = problems(sv.slurm_name, "x" * 10_000 + "\n", "the partition")
    assert len(message) < 300 and "(10001 characters)" in message


def test_a_huge_integer_memory_is_a_problem_not_an_overflow():
    with pytest.raises(ConfigError, match=r"slurm.mem_gb: 1000000.*give the memory per node"):
        SlurmProfile.from_dict({**LOCAL, "mem_gb": 10**400}, "local")


def test_a_profile_file_yaml_cannot_read_is_one_problem(tmp_path):
    (tmp_path / "huge.yaml").write_text("partition: local\nnodes: 1" + "0" * 5000 + "\n")
    found: list[str] = []
    assert load_profile(str(tmp_path / "huge.yaml"), {}, found) is None
    assert found[0].startswith("sweep.slurm.profile: ") and "cannot be read" in found[0]


def test_problems_name_the_override_or_the_profile_file_that_set_the_value(tmp_path):
    found: list[str] = []
    assert load_profile("local", {"partition": "a b", "eval": {"time_min": 0}, "colour": 1}, found) is None
    assert sorted(p.split(":")[0] for p in found) == [
        "sweep.slurm.overrides.colour", "sweep.slurm.overrides.eval.time_min", "sweep.slurm.overrides.partition"]
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump({**LOCAL, "qos": "q;id", "account": "x y"}))
    found = []
    load_profile(str(tmp_path / "mine.yaml"), {"account": "ok"}, found)
    assert [p.split(":")[0] for p in found] == ["slurm profile mine.qos"]


def test_the_shipped_profiles_and_sweeps_pass():
    for path in (REPO / "slurm" / "profiles").glob("*.yaml"):
        SlurmProfile.from_dict(yaml.safe_load(path.read_text()), path.stem)
    assert load_sweep(SMOKE).cells


# --- 1,000 hostile sweeps ------------------------------------------------------------------------------------------

BASE = load_sweep(SMOKE)  # the cells a rendered script is for; only the header and the profile vary below
HEADER = {"name": "smoke", "seeds": [0]}
PROFILE_DIR = Path(tempfile.mkdtemp(prefix="hostile_profiles_"))
atexit.register(shutil.rmtree, PROFILE_DIR, True)  # hypothesis reruns one test body: no tmp_path fixture
NAMES = ("partition", "account", "qos")
COUNTS = tuple(sv.LIMITS)
RESOURCES = ("nodes", "gpus_per_node", "tasks_per_node", "cpus_per_task", "mem_gb", "time_min", "constraint")

# Refused in every string key: control characters, quotes, $ and backticks, escapes, patterns, comments.
SURELY_BAD = ["\n#SBATCH --wrap=id", "\n", "\r", "\x00", "\t", "\x1b[2J", "$(id)", "`id`", "'", '"', "; id",
              "> /tmp/x", "#", "\\", "%x", "${HOME}", "\u202e", "\u2028", "\x85", "\ud800", "\ufeff"]
# Refused in some keys (names), harmless in others (a path's space, a constraint's & and |).
MAYBE = [" ", "é", "🙂", "ｆ", "&&id", "|id", "(a)", "[a]", "!a", "*2", ",", ".", "-", ":", "~", "=", "+", "@"]
SAFE_CHARS = "abcXYZ019_-."


@st.composite
def hostile_text(draw, benign: bool = False) -> tuple[str, bool]:
    """(text, surely refused): a safe prefix, something hostile, anything; or a very long name. `benign`: only
    what some keys take (a path's space, a constraint's &)."""
    if not benign and draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from(SAFE_CHARS[:3])) * draw(st.integers(1025, 5000)), True
    bad = not benign and draw(st.booleans())
    injection = draw(st.sampled_from(SURELY_BAD) if bad else st.sampled_from(MAYBE) | st.sampled_from(["", "_"]))
    prefix = draw(st.text(SAFE_CHARS, min_size=1, max_size=8))
    suffix = draw(st.text(max_size=8) if bad else st.text(SAFE_CHARS, max_size=8))
    return prefix + injection + suffix, bad


@st.composite
def hostile_number(draw, key: str, benign: bool = False) -> tuple[object, bool]:
    """(value, surely refused) for a count or mem_gb; `benign`: a number, in its key's bounds or not."""
    kind = 4 if benign else draw(st.integers(0, 5))
    if kind == 0:
        return draw(st.integers(-10**30, -1)), True
    if kind == 1:
        return draw(st.sampled_from([10**8, 2**63, 10**30, 10**400, 10**5000])), True
    if kind == 2:
        return draw(st.sampled_from([float("nan"), float("inf"), -float("inf"), True, None, "8", "$(id)"])), True
    if kind == 3 and key != "mem_gb":
        return draw(st.floats(-1e6, 1e6)), True  # a count is an integer
    if key == "mem_gb":
        return draw(st.floats(0.001, 64) | st.floats(allow_nan=False)), False
    # In or out of the key's bounds: either is fine.
    return draw(st.integers(1, 64) | st.integers(1, 64) | st.integers(0, 5_000_000)), False


@st.composite
def hostile_sweeps(draw):
    """A sweep header with hostile values planted in its name, output_root, profile, slurm overrides and
    (sometimes) a profile file of its own; `planted` maps each key path to whether it must be refused."""
    header, planted = dict(HEADER), {}
    benign = draw(st.integers(0, 2)) == 0  # a third of the sweeps: values that may well pass, and render
    headers = ["name", "output_root"] if benign else ["name", "output_root", "profile"]
    for key in draw(st.sets(st.sampled_from(headers), max_size=2)):
        value, bad = draw(hostile_text(benign))
        if key == "profile":
            header["slurm"] = {"profile": value}
        else:
            header[key] = value
        planted[f"sweep.{'slurm.' if key == 'profile' else ''}{key}"] = bad
    profile_file = None
    if draw(st.integers(0, 3)) == 0:  # a profile file with hostile values (UTF-8 text: no lone surrogates)
        profile_file, file_keys = dict(LOCAL), {}
        for key in draw(st.sets(st.sampled_from(NAMES + COUNTS + RESOURCES), min_size=1, max_size=3)):
            value, bad = draw(hostile_value(key, benign))
            if isinstance(value, str) and "\ud800" in value:
                value, bad = value.replace("\ud800", "\x00"), True
            if isinstance(value, int) and value.bit_length() > 10_000:  # past what YAML can write
                value = 10**400
            profile_file[key] = value
            file_keys[f"slurm profile hostile.{key}"] = bad
        planted.update(file_keys)
        planted.pop("sweep.slurm.profile", None)  # the file replaces a planted profile name
        header["slurm"] = {"profile": str(PROFILE_DIR / "hostile.yaml")}
    overrides = {}
    for key in draw(st.sets(st.sampled_from(NAMES + COUNTS + RESOURCES + tuple(f"eval.{k}" for k in RESOURCES)),
                            max_size=4)):
        value, bad = draw(hostile_value(key.split(".")[-1], benign))
        if key.startswith("eval."):
            overrides.setdefault("eval", {})[key[5:]] = value
        else:
            overrides[key] = value
            planted.pop(f"slurm profile hostile.{key}", None)  # the override replaces the file's value
        planted[f"sweep.slurm.overrides.{key}"] = bad
    if overrides:
        header["slurm"] = {**header.get("slurm", {}), "overrides": overrides}
    return header, planted, profile_file


def hostile_value(key: str, benign: bool):
    return hostile_number(key, benign) if key in COUNTS or key == "mem_gb" else hostile_text(benign)


def refused(problems: list[str], planted: dict[str, bool], stage: tuple[str, ...] = ()) -> None:
    """Each problem names a planted key (nothing else is wrong with the sweep); each value that must be refused
    at this stage (these keys; all when none given) is."""
    assert problems
    for problem in problems:
        assert any(problem.startswith(f"{key}:") for key in planted), problem
        assert "\n" not in problem  # one line each: the value is shown as its repr
    for key, bad in planted.items():
        if bad and (key in stage or not stage):
            assert any(p.startswith(f"{key}:") for p in problems), (key, problems)


def sbatch_argument(line: str) -> tuple[str, str]:
    """sbatch's own reading of one `#SBATCH` line (src/sbatch/opt.c, _get_argument): quotes group, a backslash
    escapes, an unquoted # starts a comment; returns (the first argument, what follows it)."""
    rest, out, quote, escape, i = line.removeprefix("#SBATCH").lstrip(), [], "", False, 0
    while i < len(rest) and (quote or not rest[i].isspace()):
        ch = rest[i]
        i += 1
        if escape:
            escape = False
        elif ch == "\\":
            escape = True
            continue
        elif quote:
            if ch == quote:
                quote = ""
                continue
        elif ch in "'\"":
            quote = ch
            continue
        elif ch == "#":
            i -= 1
            break
        out.append(ch)
    assert not quote, f"unmatched quote in {line!r}"
    return "".join(out), rest[i:]


def check_script(script: str, sweep, group) -> None:
    """One directive per line, each read by sbatch as exactly the value given; nothing else in the script."""
    assert not [ch for ch in script if ch != "\n" and unicodedata.category(ch)[0] == "C"]
    lines = script.split("\n")
    directives = {}
    for line in (ln for ln in lines if ln.startswith("#SBATCH")):
        argument, after = sbatch_argument(line)
        assert not after.strip(), line
        key, _, value = argument.partition("=")
        assert key not in directives, line
        directives[key] = value
    profile, res, spec = sweep.profile, group.resources, sweep.spec
    expected = {"--partition": profile.partition, "--account": profile.account, "--qos": profile.qos,
                "--constraint": res.constraint, "--nodes": str(res.nodes), "--time": str(res.time_min),
                "--cpus-per-task": str(res.cpus_per_task), "--ntasks-per-node": str(res.tasks_per_node),
                "--gpus-per-node": str(res.gpus_per_node) if res.gpus_per_node else None,
                "--job-name": f"{spec.name}-{group.name}"}
    for key, value in expected.items():
        assert directives.get(key) == value, (key, directives.get(key), value)
    logs = str(Path(spec.output_root).absolute() / spec.name / "slurm") + "/"
    assert directives["--output"].startswith(logs) and directives["--error"].startswith(logs)
    base_lines, base_directives = BASE_SHAPE[group.kind]
    assert len(lines) == base_lines - base_directives + len(directives)  # no line of its own from a value
    code = shlex.split(next(ln for ln in lines if ln.startswith("export COMEDY_CODE=")))
    snapshot = Path(spec.output_root).absolute() / spec.name / "code" / "<content hash>"
    assert code == ["export", f"COMEDY_CODE={snapshot}"]


def render_all(sweep) -> list:
    plan = make_plan(sweep)
    return [(render_sbatch(sweep, plan, g), g) for g in plan.groups]


# (lines, directives) of the smoke sweep's own scripts, by kind: the eval array's has its dependency too.
BASE_SHAPE = {g.kind: (len(s.split("\n")), sum(ln.startswith("#SBATCH") for ln in s.split("\n")))
              for s, g in render_all(BASE)}


@settings(max_examples=1000, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(case=hostile_sweeps())
def test_hostile_sweeps_are_refused_naming_the_key_or_render_one_line_per_directive(case):
    header, planted, profile_file = case
    if profile_file is not None:
        (PROFILE_DIR / "hostile.yaml").write_text(yaml.safe_dump(profile_file, allow_unicode=True), "utf-8")
    # Nothing may start a process (sbatch included): load, validate and render only.
    with mock.patch("subprocess.Popen", side_effect=AssertionError("a process was started")):
        try:
            spec = SweepSpec.from_dict(header, "smoke")
        except ConfigError as err:
            event("refused: sweep header")
            # The header is checked before any profile is read.
            return refused(err.problems, planted, ("sweep.name", "sweep.output_root", "sweep.slurm.profile"))
        found: list[str] = []
        profile = load_profile(spec.profile, spec.slurm_overrides, found)
        if found:
            # A profile that cannot be read has no values to check the overrides against.
            unread = any(p.startswith("sweep.slurm.profile:") for p in found)
            event("refused: profile not found" if unread else "refused: profile values")
            return refused(found, planted, ("sweep.slurm.profile",) if unread else ())
        assert not any(planted.values()), planted  # a value that must be refused was accepted
        event(f"rendered, {len(planted)} planted value(s) accepted")
        cells = tuple(replace(c, resources=profile.train_resources(c.config.model.params_b)) for c in BASE.cells)
        sweep = replace(BASE, spec=spec, profile=profile, cells=cells)
        for script, group in render_all(sweep):
            check_script(script, sweep, group)
