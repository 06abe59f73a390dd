"""Errors a user can fix. The CLI prints them as one message, never as a traceback."""

from __future__ import annotations


class UserError(Exception):
    """A mistake the user can fix (missing file, unknown run, bad argument); the message says how."""


class ConfigError(ValueError):
    """A configuration that cannot run. `problems` holds one line per problem, each with its fix."""

    def __init__(self, problems: list[str], where: str = ""):
        self.problems = list(problems)
        head = f"{len(self.problems)} problem(s) in {where or 'config'}:"
        super().__init__("\n".join([head, *(f"  - {p}" for p in self.problems)]))


def raise_if(problems: list[str], where: str) -> None:
    """Raise every collected problem at once, as one ConfigError naming `where`."""
    if problems:
        raise ConfigError(problems, where)
