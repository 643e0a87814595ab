"""Reading a YAML mapping field by field, collecting one clear error per bad field.

A :class:`Fields` wraps one mapping of the config file and knows where it sits
(``connectors[1].broker``). Each getter returns the value or, when it is missing or of the
wrong kind, records ``<path>.<field>: <what is wrong>`` and returns the default, so a
single run of ``gateway check-config`` lists every mistake instead of the first one.
:meth:`Fields.finish` reports keys nobody asked for (a misspelt field is an error, not
silence).
"""

from __future__ import annotations

import os
import re
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from headwater.errors import HeadwaterError

T = TypeVar("T")

#: Device ids as the ingest API takes them (proto/headwater/device/v1/device_message.proto).
DEVICE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class ConfigError(HeadwaterError, ValueError):
    """The config file is wrong; ``problems`` has one line per bad field."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))


class _Missing:
    pass


REQUIRED: Any = _Missing()


class Fields:
    """One mapping of the config file, read with checks (see the module docstring)."""

    def __init__(self, data: object, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            self.error("", f"must be a mapping, not {type(data).__name__}")
            data = {}
        self._data: Mapping[str, Any] = data
        self._read: set[str] = set()

    def where(self, name: str) -> str:
        """Return the dotted path of field ``name``."""
        if not name:
            return self.path or "(top level)"
        return f"{self.path}.{name}" if self.path else name

    def error(self, name: str, text: str) -> None:
        """Record a problem with field ``name`` (``""``: the mapping itself)."""
        self.problems.append(f"{self.where(name)}: {text}")

    def has(self, name: str) -> bool:
        """Return True when the field is present."""
        return name in self._data

    def _get(self, name: str, default: Any) -> Any:
        self._read.add(name)
        if name not in self._data or self._data[name] is None:
            if default is REQUIRED:
                self.error(name, "is required")
            return default
        return self._data[name]

    def text(
        self, name: str, default: Any = REQUIRED, pattern: re.Pattern[str] | None = None
    ) -> Any:
        """Return a string field (checked against ``pattern`` when given)."""
        value = self._get(name, default)
        if value is default:
            return value
        if not isinstance(value, str) or not value:
            self.error(name, f"must be a non-empty string, not {value!r}")
            return default
        if pattern is not None and not pattern.match(value):
            self.error(name, f"{value!r} does not match {pattern.pattern}")
            return default
        return value

    def choice(self, name: str, choices: tuple[str, ...], default: Any = REQUIRED) -> Any:
        """Return a string field that must be one of ``choices``."""
        value = self._get(name, default)
        if value is not default and value not in choices:
            self.error(name, f"must be one of {', '.join(choices)}, not {value!r}")
            return default
        return value

    def integer(
        self, name: str, default: Any = REQUIRED, low: int | None = None, high: int | None = None
    ) -> Any:
        """Return an integer field within ``[low, high]``."""
        value = self._get(name, default)
        if value is default:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(name, f"must be an integer, not {value!r}")
            return default
        return self._bounded(name, value, low, high, default)

    def number(
        self,
        name: str,
        default: Any = REQUIRED,
        low: float | None = None,
        high: float | None = None,
    ) -> Any:
        """Return a number field within ``[low, high]``."""
        value = self._get(name, default)
        if value is default:
            return value
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.error(name, f"must be a number, not {value!r}")
            return default
        return self._bounded(name, float(value), low, high, default)

    def _bounded(self, name: str, value: T, low: Any, high: Any, default: Any) -> T:
        if (low is not None and value < low) or (high is not None and value > high):
            span = f"{'-inf' if low is None else low} to {'inf' if high is None else high}"
            self.error(name, f"must be {span}, not {value!r}")
            return default
        return value

    def flag(self, name: str, default: Any = REQUIRED) -> Any:
        """Return a boolean field (YAML true/false)."""
        value = self._get(name, default)
        if value is not default and not isinstance(value, bool):
            self.error(name, f"must be true or false, not {value!r}")
            return default
        return value

    def file(self, name: str) -> Path | None:
        """Return an optional path field that must name a readable file."""
        value = self.text(name, None)
        if value is None:
            return None
        path = Path(value)
        if not path.is_file() or not os.access(path, os.R_OK):
            self.error(name, f"{value} is not a readable file")
            return None
        return path

    def secret_env(self, name: str) -> str | None:
        """Return the value of the environment variable a ``*_env`` field names."""
        variable = self.text(name, None)
        if variable is None:
            return None
        if not os.environ.get(variable):
            self.error(name, f"the environment variable {variable} is not set")
            return None
        return os.environ[variable]

    def template(self, name: str, keys: tuple[str, ...], default: Any = REQUIRED) -> Any:
        """Return a ``str.format`` template whose fields are all among ``keys``."""
        value = self.text(name, default)
        if value is default:
            return value
        try:
            used = [f for _, f, _, _ in string.Formatter().parse(value) if f is not None]
        except ValueError as exc:
            self.error(name, f"{value!r} is not a template: {exc}")
            return default
        unknown = [f for f in used if f not in keys]
        if unknown:
            levels = [k for k in keys if k.isdigit()]
            allowed = [f"{{0}}..{{{len(levels) - 1}}} (topic levels)"] if levels else []
            allowed += ["{" + k + "}" for k in keys if not k.isdigit()]
            self.error(name, f"{value!r} uses {{{unknown[0]}}}; it may use {', '.join(allowed)}")
            return default
        return value

    def section(self, name: str, required: bool = False) -> Fields:
        """Return the nested mapping ``name`` (an empty one when absent and optional)."""
        value = self._get(name, REQUIRED if required else None)
        return Fields(value, self.where(name), self.problems)

    def sections(self, name: str, required: bool = False) -> list[Fields]:
        """Return a list of mappings (``connectors``, ``items``...)."""
        value = self._get(name, REQUIRED if required else [])
        if value is REQUIRED:
            return []
        if not isinstance(value, list):
            self.error(name, f"must be a list, not {type(value).__name__}")
            return []
        if required and not value:
            self.error(name, "must list at least one entry")
        return [Fields(v, f"{self.where(name)}[{i}]", self.problems) for i, v in enumerate(value)]

    def strings(self, name: str, default: list[str] | None = None) -> list[str]:
        """Return a list of non-empty strings."""
        value = self._get(name, default if default is not None else [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            self.error(name, f"must be a list of non-empty strings, not {value!r}")
            return default or []
        return list(value)

    def finish(self) -> None:
        """Report every key that no getter read: unknown (probably misspelt) fields."""
        for key in self._data:
            if key not in self._read:
                self.error(str(key), "is not a known field")
