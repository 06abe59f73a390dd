"""The tracking server's decisions without starting anything: messages, the URI, the state file."""

from __future__ import annotations

import pytest

from orchestrator.tracking.postgres import ensure_installed, find_bin
from orchestrator.tracking.server import State, check_data_dir, exposure_note, machine_name, read_state, write_state
from record.errors import UserError


def test_missing_postgres_says_how_to_install_it_with_root_or_without(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no initdb on PATH either
    with pytest.raises(UserError) as err:
        ensure_installed(False, tmp_path / "apt.log", print, root=tmp_path / "no-postgresql")
    assert "apt-get install postgresql" in str(err.value) and "\n" not in str(err.value)
    assert "conda install -c conda-forge postgresql" in str(err.value) and "--pg-bin DIR" in str(err.value)
    assert not (tmp_path / "apt.log").exists()


def fake_bin(directory, names=("initdb", "pg_ctl", "postgres")):
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_text("#!/bin/sh\n")
        (directory / name).chmod(0o755)
    return directory


def test_postgres_on_path_or_given_is_used_without_root(tmp_path, monkeypatch):
    """conda-forge's PostgreSQL (on PATH, installed by the user) when Debian's is absent; --pg-bin wins; a
    directory lacking a binary is one message naming it."""
    conda = fake_bin(tmp_path / "conda" / "bin")
    fake_bin(tmp_path / "half", ("initdb",))
    monkeypatch.setenv("PATH", f"{tmp_path / 'half'}:{conda}")
    assert find_bin(tmp_path / "no-debian") == conda  # the first directory holding all three
    assert ensure_installed(False, tmp_path / "a.log", print, root=tmp_path / "no-debian") == conda
    given = fake_bin(tmp_path / "given")
    assert ensure_installed(False, tmp_path / "a.log", print, root=tmp_path, pg_bin=given) == given
    with pytest.raises(UserError, match=r"--pg-bin: .*half has no executable pg_ctl, postgres"):
        ensure_installed(False, tmp_path / "a.log", print, pg_bin=tmp_path / "half")


def test_the_newest_debian_postgres_is_used(tmp_path):
    for major in ("13", "15", "9.6"):
        for name in ("initdb", "pg_ctl", "postgres"):
            (tmp_path / major / "bin").mkdir(parents=True, exist_ok=True)
            (tmp_path / major / "bin" / name).touch()
    (tmp_path / "16" / "bin").mkdir(parents=True)  # a half-installed newer one is not picked
    assert find_bin(tmp_path) == tmp_path / "15" / "bin"


def test_only_a_non_loopback_address_gets_the_authentication_warning():
    assert exposure_note("127.0.0.1", 5000, False) is None
    warning = exposure_note("0.0.0.0", 5000, False)
    assert warning.startswith("warning: MLflow's server has no authentication unless its auth app is enabled")
    assert "--auth" in warning
    assert exposure_note("0.0.0.0", 5000, True).startswith("note:")


def test_jobs_get_a_name_they_can_reach():
    assert State(host="127.0.0.1", port=5001).uri() == "http://127.0.0.1:5001"
    assert State(host="0.0.0.0", port=5001).uri() == f"http://{machine_name()}:5001"
    assert State(host="10.0.0.5", port=80).uri() == "http://10.0.0.5:80"


def test_a_data_dir_with_other_files_is_refused_and_the_state_is_private(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="holds other files and no tracking server"):
        check_data_dir(tmp_path)
    with pytest.raises(UserError, match="is a file"):
        check_data_dir(tmp_path / "notes.txt")
    check_data_dir(tmp_path / "new")  # missing: fine, `up` creates it
    write_state(tmp_path / "srv", State(port=5050, auth=True, admin_password="x"))
    assert read_state(tmp_path / "srv").port == 5050
    assert (tmp_path / "srv" / "tracking.json").stat().st_mode & 0o077 == 0
    check_data_dir(tmp_path / "srv")
