"""The suite sets up what it needs itself: a check that needs a browser gets it through tests/support/browser.py
(which installs Debian's chromium when it is missing), so none skips on a fresh machine and passes on a used one."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
SHORTCUT = re.compile(r"""which\(\s*["']chromium["']|["']chromium["']\s*,\s*["']--headless""")


def test_every_browser_check_goes_through_the_one_installing_fixture():
    found = [f"{p.relative_to(TESTS)}:{n}" for p in sorted(TESTS.rglob("*.py")) if p.name != "browser.py"
             and p != Path(__file__) for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if SHORTCUT.search(line)]
    assert not found, "use tests/support/browser.py chromium(), which installs it:\n" + "\n".join(found)
