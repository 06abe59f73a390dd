"""`orchestrate data` and `orchestrate eval`: user mistakes end in one message with the fix (exit 2), no traceback."""

from __future__ import annotations

import json

import pytest

from eval import local_data
from orchestrator.cli import main
from tests.fixtures.eval_data import FIXTURE_ROWS, prepare_fixture_data


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_prepare_without_a_hub_writes_what_it_can_and_names_the_rest(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out, err = run(capsys, "data", "prepare", "--out", str(tmp_path), "--countdown-train", "5",
                         "--countdown-heldout", "2")
    assert code == 2 and "Traceback" not in err
    hub = [n for n, s in local_data.SPECS.items() if s.hub]
    assert err.startswith(f"error: {len(hub)} dataset(s) not written to {tmp_path}:")
    assert all(f"  - {name}: not fetched: HF_HUB_OFFLINE" in err for name in hub)
    assert "tiny_test: 200 rows" in out
    assert json.loads((tmp_path / local_data.MANIFEST).read_text())["datasets"]["countdown_heldout"]["rows"] == 2


def test_check_lists_every_problem(tmp_path, capsys):
    prepare_fixture_data(tmp_path)
    code, _, err = run(capsys, "data", "check", str(tmp_path))
    assert code == 2
    # The fixture files are a few rows each, so every hub dataset misses its paper count.
    for name in FIXTURE_ROWS:
        assert f"  - {name}: {FIXTURE_ROWS[name]} rows, expected {local_data.SPECS[name].rows}" in err
    assert err.startswith(f"error: {len(FIXTURE_ROWS)} problem(s) in {tmp_path}:")


def test_check_of_a_good_directory(tmp_path, capsys, monkeypatch):
    prepare_fixture_data(tmp_path)
    monkeypatch.setattr(local_data, "SPECS", {n: s for n, s in local_data.SPECS.items() if not s.hub})
    code, out, _ = run(capsys, "data", "check", str(tmp_path))
    assert code == 0 and "every dataset present" in out


@pytest.mark.parametrize("argv,message", [
    (["eval", "/no/such/dir"], "/no/such/dir does not exist; give a run directory"),
    (["eval", "0123456789ab", "--runs-root", "/no/runs"], "no run directory /no/runs/*/0123456789ab"),
])
def test_eval_bad_targets(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err and "Traceback" not in err
    assert err.count("\n") == 1  # one message


def test_eval_of_a_directory_that_is_nothing_known(tmp_path, capsys):
    code, _, err = run(capsys, "eval", str(tmp_path), "--k", "4")
    assert code == 2 and "is neither a run directory (config.yaml), a checkpoint" in err
