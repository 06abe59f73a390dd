"""The one way a test gets a headless browser: Debian's chromium, installed with apt when it is missing (the
project's own setup for its browser checks, so none skips on a fresh machine); a skip, saying why, only where it
cannot be installed (no apt-get, no root and no sudo, or apt refusing). Every browser check calls `chromium()`."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def chromium() -> str:
    """The chromium binary, installed with apt when missing; skip (with why) only where that cannot be done."""
    found = shutil.which("chromium")
    if found:
        return found
    if not shutil.which("apt-get"):
        pytest.skip("Debian chromium is not installed and there is no apt-get to install it")
    if os.geteuid() != 0 and not shutil.which("sudo"):
        pytest.skip("Debian chromium is not installed; installing it needs root (or sudo): apt-get install chromium")
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
        done = subprocess.run([*sudo, *cmd], capture_output=True, text=True, env=env, timeout=900)
        if done.returncode != 0:
            pytest.skip(f"cannot install Debian chromium ({' '.join(cmd)} exit {done.returncode}): "
                        f"{(done.stderr or done.stdout)[-500:]}")
    return shutil.which("chromium") or pytest.skip("apt-get installed chromium but it is not on PATH")
