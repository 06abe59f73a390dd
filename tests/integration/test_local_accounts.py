"""The local cluster enforces associations (AccountingStorageEnforce=associations, slurm/templates/slurm.conf.in), as
real clusters do: sbatch refuses a user with no association, and `slurm/local-cluster add-user` gives one (what a
site's admin does with `sacctmgr add user`), idempotently."""

from __future__ import annotations

import os
import pwd
import subprocess
import time

import pytest

pytestmark = pytest.mark.slurm
GUEST = "comedy-guest"  # a user only this test gives an association, and takes it away again


def test_a_user_without_an_association_is_refused_until_add_user(slurm_cluster):
    if os.geteuid() != 0:
        pytest.skip("making a user and changing associations need root")
    try:
        guest = pwd.getpwnam(GUEST)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", GUEST], check=True)
        guest = pwd.getpwnam(GUEST)
    # a leftover association from an interrupted run would make the first check pass vacuously
    subprocess.run(["sacctmgr", "-i", "delete", "user", GUEST], capture_output=True, check=False)

    def test_only(*flags: str) -> subprocess.CompletedProcess:
        return subprocess.run(["setpriv", f"--reuid={guest.pw_uid}", f"--regid={guest.pw_gid}", "--clear-groups",
                               "sbatch", "--test-only", *flags, "--wrap", "true"], capture_output=True, text=True,
                              cwd="/", timeout=60)

    def add_user() -> subprocess.CompletedProcess:
        return subprocess.run([str(slurm_cluster.script), "add-user", GUEST], capture_output=True, text=True,
                              timeout=300)

    try:
        deadline = time.monotonic() + 30  # a deleted association reaches slurmctld a moment later
        while (refused := test_only()).returncode == 0 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert refused.returncode != 0 and "Invalid account" in refused.stderr, refused.stderr
        first = add_user()
        assert first.returncode == 0 and "association in account 'comedy'" in first.stdout, first.stdout + first.stderr
        accepted = test_only()  # add-user returns once slurmctld knows the association
        assert accepted.returncode == 0, accepted.stderr
        again = add_user()
        assert again.returncode == 0 and again.stdout == "", again.stdout + again.stderr  # nothing changed
        other = test_only("--account=chemistry")  # an account it has no association in
        assert other.returncode != 0 and "Invalid account" in other.stderr, other.stderr
    finally:
        subprocess.run(["sacctmgr", "-i", "delete", "user", GUEST], capture_output=True, check=False)
