"""Data preparation and checking (eval/prepare.py, eval/local_data.py), with fixture files in the hub's schemas;
where the data directory is by default (trainer/tasks/data.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval import local_data
from eval.prepare import PrepareError, math_rows, math_squared_rows, mmlu_rows, prepare
from orchestrator.cli import build_parser
from record.files import sha256_file
from tests.fixtures.eval_data import COUNTDOWN_SIZES, FIXTURE_ROWS, fixture_fetch, prepare_fixture_data
from trainer.tasks import data as task_data
from trainer.tasks.common import read_jsonl


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    return prepare_fixture_data(tmp_path_factory.mktemp("data"))


def test_prepare_writes_every_dataset_with_its_manifest(prepared):
    manifest = json.loads((prepared / local_data.MANIFEST).read_text())
    assert set(manifest["datasets"]) == set(local_data.SPECS)
    assert manifest["missing"] == {}
    for name, entry in manifest["datasets"].items():
        path = prepared / entry["file"]
        assert entry["sha256"] == sha256_file(path)
        assert entry["rows"] == len(read_jsonl(path))
        want = FIXTURE_ROWS.get(name, local_data.SPECS[name].rows)
        if want is not None:
            assert entry["rows"] == want, name
    assert manifest["datasets"]["countdown_train"]["rows"] == COUNTDOWN_SIZES[0]
    assert manifest["datasets"]["countdown_heldout"]["rows"] == COUNTDOWN_SIZES[1]
    assert local_data.check(prepared, expected=FIXTURE_ROWS) == []


def test_rows_have_the_common_schema_and_golds_are_extracted(prepared):
    math_test = read_jsonl(prepared / "math_test.jsonl")
    assert [r["answer"] for r in math_test] == ["1,\\!000", "2"]  # the last box of the solution, verbatim
    physics = read_jsonl(prepared / "mmlu_college_physics.jsonl")
    assert [r["mmlu_split"] for r in physics] == ["test", "test", "validation", "dev"]
    assert [r["answer"] for r in physics] == ["B", "C", "D", "A"]
    assert physics[0]["problem"].endswith("(A) zero\n(B) g downward\n(C) g upward\n(D) increasing")
    for name in local_data.SPECS:
        rows = read_jsonl(prepared / local_data.SPECS[name].file)
        assert all({"problem", "answer", "unique_id"} <= set(r) for r in rows), name
        assert len({r["unique_id"] for r in rows}) == len(rows), name


def test_held_out_countdown_never_repeats_a_training_problem(prepared):
    train = {local_data.countdown_key(r) for r in read_jsonl(prepared / "countdown_train.jsonl")}
    heldout = [local_data.countdown_key(r) for r in read_jsonl(prepared / "countdown_heldout.jsonl")]
    assert len(set(heldout)) == len(heldout)
    assert not train & set(heldout)


def test_check_reports_every_problem_at_once(prepared, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in prepared.iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    (broken / "math500.jsonl").unlink()
    rows = read_jsonl(broken / "math_test.jsonl")
    (broken / "math_test.jsonl").write_text(json.dumps(rows[0]) + "\n")  # truncated: 1 row of 2
    with open(broken / "tiny_ood.jsonl", "a") as f:
        f.write(json.dumps({"problem": "x"}) + "\n")  # an extra row without an answer
    problems = local_data.check(broken, expected=FIXTURE_ROWS)
    text = "\n".join(problems)
    assert "math500: " in text and "is missing" in text
    assert "math_test: " in text and "sha256" in text and "1 rows, expected 2" in text
    assert "tiny_ood: 201 rows, expected 200" in text and "lack problem/answer/unique_id" in text
    assert "differs from trainer/tasks/tiny.py" in text
    # The real counts are the paper's: fixture-sized files fail them.
    assert any("mmlu_college_physics: 4 rows, expected 118" in p for p in local_data.check(prepared))


def test_check_of_a_missing_directory_says_how_to_make_it(tmp_path):
    assert local_data.check(tmp_path / "nope") == [f"{tmp_path / 'nope'}: no such directory; run `orchestrate data "
                                             f"prepare --out {tmp_path / 'nope'}`"]


def test_an_unreachable_hub_fails_naming_every_dataset_after_writing_the_rest(tmp_path):
    def offline(dataset_id, config, split):
        raise ConnectionError(f"Couldn't reach '{dataset_id}' on the Hub")

    with pytest.raises(PrepareError) as err:
        prepare(tmp_path, fetch=offline, countdown_sizes=(5, 2), log=lambda _: None)
    hub = [n for n, s in local_data.SPECS.items() if s.hub]
    assert set(err.value.missing) == set(hub)
    assert "Couldn't reach 'cais/mmlu'" in str(err.value) and "login node" in str(err.value)
    manifest = json.loads((tmp_path / local_data.MANIFEST).read_text())
    assert set(manifest["datasets"]) == set(local_data.SPECS) - set(hub)
    assert set(manifest["missing"]) == set(hub)
    assert (tmp_path / "tiny_test.jsonl").exists() and not (tmp_path / "math500.jsonl").exists()


def test_a_wrong_row_count_is_not_written(tmp_path):
    with pytest.raises(PrepareError, match="math500: 3 rows, expected 500; not written"):
        prepare(tmp_path, fetch=fixture_fetch, countdown_sizes=(5, 2), log=lambda _: None,
                expected={k: v for k, v in FIXTURE_ROWS.items() if k != "math500"})
    assert not (tmp_path / "math500.jsonl").exists()


def test_converters_refuse_what_they_cannot_map():
    with pytest.raises(ValueError, match="no \\\\boxed"):
        math_rows([{"problem": "p", "solution": "no box here"}], "train")
    with pytest.raises(ValueError, match="MATH\\^2 columns \\['text', 'label'\\]"):
        math_squared_rows([{"text": "p", "label": "1"}])
    assert math_squared_rows([{"Question": "p", "Answer": "\\boxed{7}"}])[0]["answer"] == "7"
    with pytest.raises(ValueError, match="5 choices"):
        mmlu_rows({"test": [{"question": "q", "choices": list("abcde"), "answer": 0}], "validation": [], "dev": []},
                  "college_physics")


def test_one_rule_names_the_data_directory_and_the_help_says_it(monkeypatch, capsys):
    """$COMEDY_DATA, else the checkout's data/ (not the working directory's): trainer/tasks/data.py `data_dir`,
    which the jobs, `orchestrate eval` and `orchestrate data prepare` use, and which the help quotes."""
    monkeypatch.delenv(task_data.DATA_ENV, raising=False)
    assert task_data.data_dir() == Path(task_data.__file__).resolve().parents[2] / "data"
    monkeypatch.setenv(task_data.DATA_ENV, "/shared/comedy-data")
    assert task_data.data_dir() == Path("/shared/comedy-data")
    with pytest.raises(SystemExit):
        build_parser("data").parse_args(["data", "prepare", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert f"default: {task_data.DATA_DIR_RULE}" in said and "./data" not in said
