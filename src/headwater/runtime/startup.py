"""What every ``headwater`` command shares at start-up: clear failures and its settings.

A process that cannot start should say why in one line and exit non-zero, not print a
traceback: :class:`StartupError` carries that line, and ``headwater.cli.main`` prints it.
:func:`env_help` lists the environment variables a settings class reads, with their
defaults, for ``--help``; it runs the class's own ``from_env``, so the list cannot drift.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable, Mapping
from typing import Any

from headwater.errors import HeadwaterError
from headwater.runtime.env import SettingError, recording


class StartupError(HeadwaterError, RuntimeError):
    """A command cannot start; the message says what to fix, in one line."""


class EnvHelpFormatter(argparse.HelpFormatter):
    """Wrap the description as usual but print the variables epilog as it is (a table)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith(ENV_HEADING):
            return text
        return super()._fill_text(text, width, indent)


ENV_HEADING = "environment variables (default):"


def settings_variables(from_env: Callable[[Mapping[str, str]], Any]) -> dict[str, str]:
    """Return ``{variable: default}`` of every setting ``from_env`` reads, in reading order.

    ``from_env`` runs against an empty environment: every read then reports its default.
    A check that fails on defaults alone (a required setting) is expected and ignored: the
    reads happen before the checks.
    """
    with recording() as reads, contextlib.suppress(SettingError):
        from_env({})
    return dict(reads)


def env_help(
    *readers: Callable[[Mapping[str, str]], Any], extra: Mapping[str, str] | None = None
) -> str:
    """Return an argparse epilog listing the variables ``readers`` read, with defaults.

    Args:
        readers: ``from_env`` functions of settings classes.
        extra: further ``{variable: default}`` read outside a settings class (logging).
    """
    variables: dict[str, str] = {}
    for reader in readers:
        variables |= settings_variables(reader)
    variables |= dict(extra or {})
    width = max(len(n) for n in variables)
    lines = [f"  {name:<{width}}  {default or '(unset)'}" for name, default in variables.items()]
    return ENV_HEADING + "\n" + "\n".join(lines)


def require_readable(setting: str, path: str) -> None:
    """Raise :class:`StartupError` unless ``path`` (the value of ``setting``) can be read."""
    if not os.path.isfile(path):
        raise StartupError(f"{setting}={path}: no such file")
    if not os.access(path, os.R_OK):
        raise StartupError(f"{setting}={path}: not readable by this user")


def require_java(what: str) -> str:
    """Return the ``java`` executable, or raise :class:`StartupError` saying ``what`` needs it."""
    from headwater.runtime.jvm import JvmSetupError, java

    try:
        return java()
    except JvmSetupError as exc:
        raise StartupError(f"{what} needs Java: {exc}") from None
