"""Errors a user can fix. The CLI prints them as one message, never as a traceback."""

from trainer.config import ConfigError


class UserError(Exception):
    """A mistake the user can fix (missing file, unknown run, bad argument); the message says how."""


__all__ = ["ConfigError", "UserError"]
