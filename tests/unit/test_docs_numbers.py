"""A number a doc quotes from the code is the number the code computes today: each row below finds the sentence in
its doc and recomputes what it quotes, so a change that moves the number fails here until the doc says the new one
(a doc that copied a figure from a test once said 19,992 GPU-hours while the code and its test said 20,004)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def number(text: str) -> float:
    return float(text.replace(",", ""))


def quoted(doc: str, pattern: str) -> tuple[float, ...]:
    """The numbers `pattern`'s groups capture in `doc` (one match, or the doc lost the sentence)."""
    found = re.findall(pattern, re.sub(r"\s+", " ", (REPO / doc).read_text(encoding="utf-8")))
    assert len(found) == 1, f"{doc}: expected one sentence matching {pattern!r}, found {len(found)}"
    return tuple(number(n) for n in (found[0] if isinstance(found[0], tuple) else (found[0],)))


def test_submit_md_quotes_the_on_policy_sweeps_gpu_hours_the_dry_run_prints():
    """docs/submit.md's GPU-hours of sweeps/onpolicy.yaml, read from what `orchestrate sweep --dry-run` prints (the
    costs a user sees), with and without retries."""
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "sweep", "--dry-run", "--rows", "1",
                           str(REPO / "sweeps" / "onpolicy.yaml")], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    printed = re.search(r"GPU-hours: at most ([\d.]+) .*?; up to ([\d.]+) ", done.stdout)
    assert printed, done.stdout[-2000:]
    doc = quoted("docs/submit.md", r"The paper's on-policy sweep: ([\d,.]+) and ([\d,.]+)")
    assert doc == (number(printed[1]), number(printed[2])), \
        f"docs/submit.md quotes {doc}; the dry run prints {printed[1]} and {printed[2]}: update the doc"


def test_the_sentence_is_found_across_a_line_break_and_its_loss_fails(tmp_path, monkeypatch):
    doc = tmp_path / "docs" / "x.md"
    doc.parent.mkdir()
    doc.write_text("The paper's on-policy sweep: 19,992 and\n  79,968 (old).\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert quoted("docs/x.md", r"The paper's on-policy sweep: ([\d,.]+) and ([\d,.]+)") == (19992, 79968)
    with pytest.raises(AssertionError, match="found 0"):
        quoted("docs/x.md", r"The on-policy sweep costs ([\d,.]+)")
