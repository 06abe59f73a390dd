"""The one rich Console every command prints through (rich only: a light import for the login node's commands)."""

from __future__ import annotations

import sys

from rich.console import Console


def console() -> Console:
    """Rich output without markup (values like [countdown] print as they are); 240 columns when not a
    terminal, so logs and tests get whole table rows."""
    return Console(highlight=False, markup=False, width=None if sys.stdout.isatty() else 240)
