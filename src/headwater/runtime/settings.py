"""One declaration per setting: read it, flag it, explain it and document it from that one place.

A settings class is a frozen dataclass that inherits :class:`Settings`, names its variable
prefix and declares each field with :func:`setting` (default, help, unit, secret, limits).
Everything else is derived from that declaration, so nothing can drift from it (the shape
of quix-streams' ``ConnectionConfig``, with the standard library only):

- the variable: ``env_prefix`` + the field's name in capitals, ``_s`` spelt ``_SECONDS``
  (the one duration convention: float seconds);
- :meth:`Settings.from_env`: typed, checked values; a bad one is a
  :class:`~headwater.runtime.env.SettingError` naming the variable (one line, exit 2);
- :meth:`Settings.add_arguments` / :meth:`Settings.from_args`: the command-line flags of the
  settings that have one, their ``--help`` naming the variable and the default;
- :meth:`Settings.markdown_table`: the documentation table (``scripts/settings_docs.py``
  writes it into the docs; a test fails when a table there is stale).

An earlier name of a variable (:class:`Renamed`), or an earlier flag, is still read for one
release; reading it logs a warning naming the new one. An earlier duration written with a
unit (``500ms``, ``30s``, ``10m``) is read as the seconds it says. Secrets are kept out of
``repr`` and get no flag (a command line is visible to every user of the host).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Self, get_args, get_origin

from headwater.runtime.env import SettingError, parse_duration, read_variable

log = logging.getLogger("headwater.settings")

_KEY = "headwater.setting"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True)
class Renamed:
    """An earlier name of a setting, still read (with a warning) until the next release."""

    name: str
    #: What an old value is multiplied by, e.g. 0.001 for a ``_MS`` name of a seconds setting.
    scale: float = 1.0
    #: The earlier form was a duration with a unit (``500ms``, ``30s``, ``10m``, ``1h``, ``2d``).
    with_unit: bool = False
    #: The earlier command-line flag, still taken (not shown by ``--help``); "": none.
    flag: str = ""

    def value(self, d: Declared, raw: str, label: str) -> Any:
        """Return ``raw``, given in this earlier form, as the value of ``d``."""
        if self.with_unit:
            seconds = parse_duration(raw, label) * self.scale
            return d.parse(f"{seconds:g}", label)
        if self.scale == 1.0:
            return d.parse(raw, label)
        return d.parse(str(_parse(float, raw, label, None) * self.scale), label)


@dataclass(frozen=True)
class _Spec:
    help: str
    env: str | None
    unit: str
    secret: bool
    minimum: float | None
    choices: tuple[str, ...]
    flag: bool
    shown: str | None
    renamed: tuple[Renamed, ...]


def setting(
    default: Any = dataclasses.MISSING,
    *,
    help: str,
    unit: str = "",
    secret: bool = False,
    minimum: float | None = None,
    choices: tuple[str, ...] = (),
    flag: bool = False,
    env: str | None = None,
    shown: str | None = None,
    renamed: tuple[Renamed, ...] = (),
    default_factory: Any = dataclasses.MISSING,
) -> Any:
    """Declare one setting: a dataclass field carrying everything that is said about it.

    Args:
        default: The value when the variable is unset or empty; none: the setting is required.
        help: One line for ``--help`` and the docs (Markdown backticks allowed).
        unit: What a number counts (``s``, ``bytes``); shown beside the default.
        secret: Never printed: out of ``repr``, no flag, no default shown.
        minimum: The smallest value a number may take.
        choices: The values a text may take (matched in any case).
        flag: Also a command-line flag (``--`` and the variable's suffix in lower case).
        env: The variable's suffix when it is not the field's name; ``""``: code only.
        shown: The default as the docs show it, when it depends on the machine.
        renamed: Earlier names still read for one release.
        default_factory: As for a dataclass field.
    """
    spec = _Spec(help, env, unit, secret, minimum, choices, flag and not secret, shown, renamed)
    return dataclasses.field(
        default=default,
        default_factory=default_factory,
        repr=not secret,
        metadata={_KEY: spec},
    )


@dataclass(frozen=True)
class Declared:
    """One declared setting of a class, with everything derived from its declaration."""

    field: str
    #: The class's ``env_prefix``, and the rest of the variable name ("": code only).
    prefix: str
    suffix: str
    kind: Any
    default: Any
    spec: _Spec

    @property
    def variable(self) -> str:
        """The full variable name, or "" for a setting given in code only."""
        return self.prefix + self.suffix if self.suffix else ""

    @property
    def required(self) -> bool:
        """True when the setting has no default."""
        return self.default is dataclasses.MISSING

    @property
    def flag(self) -> str:
        """The command-line flag (``--bootstrap-servers``), or "" when it has none."""
        if not (self.spec.flag and self.suffix):
            return ""
        return "--" + self.suffix.lower().replace("_", "-")

    @property
    def choices(self) -> tuple[str, ...]:
        """The values the setting may take, when they are few (declared, or a Literal)."""
        kind = self.kind
        if get_origin(kind) in (types.UnionType, typing.Union):
            kind = next(a for a in get_args(kind) if a is not type(None))
        if get_origin(kind) is Literal:
            return tuple(str(a) for a in get_args(kind))
        return self.spec.choices

    def shown_default(self) -> str:
        """The default as ``--help`` and the docs show it ("" when there is none)."""
        if self.spec.shown is not None:
            return self.spec.shown
        if self.required or self.spec.secret:
            return ""
        return _text(self.default)

    def parse(self, raw: str, label: str) -> Any:
        """Return ``raw`` as this setting's type, checked; ``label`` names it in errors."""
        value = _parse(self.kind, raw.strip(), label, self.spec.minimum)
        if self.spec.choices and value is not None:
            return _choice(value, label, self.spec.choices)
        return value


class Settings:
    """Base of a frozen settings dataclass whose fields are declared with :func:`setting`."""

    #: The prefix of every variable of the class, e.g. ``HEADWATER_KAFKA_``.
    env_prefix: ClassVar[str] = "HEADWATER_"

    @classmethod
    def declared(cls) -> list[Declared]:
        """Return the declared settings, in declaration order."""
        hints = typing.get_type_hints(cls)
        found = []
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            spec = f.metadata.get(_KEY)
            if spec is None:
                continue
            default = f.default
            if f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            suffix = _suffix(f.name, spec)
            found.append(Declared(f.name, cls.env_prefix, suffix, hints[f.name], default, spec))
        return found

    @classmethod
    def variable(cls, field: str) -> str:
        """Return the variable name of ``field``."""
        return next(d.variable for d in cls.declared() if d.field == field)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **given: Any) -> Self:
        """Read every declared setting from ``env`` (default ``os.environ``).

        Args:
            env: The environment to read.
            given: Values of fields that are not read from a variable (computed ones).

        Raises:
            SettingError: a value that cannot be used, naming its variable.
        """
        return cls._build(env, {}, given)

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser | Any) -> None:
        """Add a flag for every setting declared with ``flag=True`` (unset: the variable)."""
        for d in cls.declared():
            if not d.flag:
                continue
            default = d.shown_default() or "none"
            choices = f"; one of {', '.join(d.choices)}" if d.choices else ""
            text = f"{d.spec.help}{choices} (default: ${d.variable}, else {default})"
            text = text.replace("%", "%%")  # argparse formats help with %
            if d.kind is bool:
                parser.add_argument(
                    d.flag, dest=d.field, action=argparse.BooleanOptionalAction, help=text
                )
            else:
                metavar = d.flag[2:].upper().replace("-", "_")
                parser.add_argument(d.flag, dest=d.field, metavar=metavar, help=text)
            for old in d.spec.renamed:
                if old.flag:
                    parser.add_argument(old.flag, dest=_old_dest(old), help=argparse.SUPPRESS)

    @classmethod
    def from_args(
        cls, args: argparse.Namespace, env: Mapping[str, str] | None = None, **given: Any
    ) -> Self:
        """Read the settings as :meth:`from_env` does; a flag given on the command line wins."""
        flags = {}
        for d in cls.declared():
            value = getattr(args, d.field, None) if d.flag else None
            if value is not None:
                flags[d.field] = value if isinstance(value, bool) else d.parse(value, d.flag)
            elif (old := _earlier_value(d, _earlier_flags(args, d))) is not None:
                flags[d.field] = old
        return cls._build(env, flags, given)

    @classmethod
    def markdown_table(cls, with_fields: bool = False) -> str:
        """Return the Markdown table of the declared settings (``with_fields``: code-only too)."""
        head = ["setting"] if with_fields else []
        rows = [
            "| " + " | ".join([*head, "variable", "default", "meaning"]) + " |",
            "| " + " | ".join(["---"] * (len(head) + 3)) + " |",
        ]
        for d in cls.declared():
            if not (d.variable or with_fields):
                continue
            name = [f"`{d.field}`"] if with_fields else []
            variable = f"`{d.variable}`" if d.variable else ""
            shown = d.shown_default()
            default = "(required)" if d.required else f"`{shown}`" if shown else "(none)"
            if shown.startswith("("):  # a description, not a value: "(system)"
                default = shown
            if d.spec.unit and shown:
                default += f" {d.spec.unit}"
            meaning = d.spec.help
            if d.choices:
                meaning += "; one of " + ", ".join(f"`{c}`" for c in d.choices)
            if d.flag:
                meaning += f"; flag `{d.flag}`"
            if d.spec.renamed:
                old = ", ".join(
                    f"`{r.name}`" + (f", flag `{r.flag}`" if r.flag else "") for r in d.spec.renamed
                )
                meaning += f" (earlier name {old}: still read until the next release)"
            rows.append("| " + " | ".join([*name, variable, default, meaning]) + " |")
        return "\n".join(rows) + "\n"

    def check(self) -> None:
        """Check what no single value shows (settings that need each other); raise SettingError.

        Runs after :meth:`from_env` and :meth:`from_args` only: objects built in code are
        checked by their ``__post_init__``, if at all.
        """

    @classmethod
    def _build(
        cls, env: Mapping[str, str] | None, flags: Mapping[str, Any], given: Mapping[str, Any]
    ) -> Self:
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        missing = []
        for d in cls.declared():
            if not d.variable:
                continue
            raw = read_variable(env, d.variable, d.shown_default())
            if d.field in flags:
                values[d.field] = flags[d.field]
            elif raw:
                values[d.field] = d.parse(raw, d.variable)
            elif (old := _earlier_value(d, env)) is not None:
                values[d.field] = old
            elif d.required:
                missing.append(d)
        if missing:  # checked after every read, so --help's recording sees them all
            d = missing[0]
            where = f"{d.flag} or {d.variable}" if d.flag else d.variable
            raise SettingError(f"{where} is not set: {d.spec.help}")
        settings = cls(**(values | dict(given)))
        settings.check()
        return settings


def _suffix(field: str, spec: _Spec) -> str:
    """The variable's suffix: the field's name in capitals, a trailing ``_s`` spelt ``_SECONDS``."""
    if spec.env is not None:
        return spec.env
    name = field.upper()
    return name[:-2] + "_SECONDS" if name.endswith("_S") else name


def _earlier_value(d: Declared, given: Mapping[str, str]) -> Any:
    """The value ``d`` was given under an earlier name or flag (warned); None when none was."""
    for old in d.spec.renamed:
        for label, new in ((old.name, d.variable), (old.flag, d.flag)):
            raw = given.get(label, "").strip() if label else ""
            if raw:
                log.warning(
                    "%s is deprecated: set %s instead (the earlier name is read until the "
                    "next release)",
                    label,
                    new,
                    extra={"setting": d.variable, "deprecated": label},
                )
                return old.value(d, raw, label)
    return None


def _old_dest(old: Renamed) -> str:
    """Where argparse keeps the value of an earlier flag."""
    return "renamed_" + old.flag.lstrip("-").replace("-", "_")


def _earlier_flags(args: argparse.Namespace, d: Declared) -> dict[str, str]:
    """``{earlier flag: value}`` of the earlier flags of ``d`` given on the command line."""
    given = {old.flag: getattr(args, _old_dest(old), None) for old in d.spec.renamed if old.flag}
    return {flag: value for flag, value in given.items() if value is not None}


def _text(value: Any) -> str:
    """A default as a person would type it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def _parse(kind: Any, raw: str, label: str, minimum: float | None) -> Any:
    """Return ``raw`` as ``kind``: str, int, float, bool, Literal, tuple[str, ...] or X | None."""
    origin = get_origin(kind)
    if origin in (types.UnionType, typing.Union):
        inner = [a for a in get_args(kind) if a is not type(None)]
        return _parse(inner[0], raw, label, minimum) if raw else None
    if origin is Literal:
        return _choice(raw, label, tuple(str(a) for a in get_args(kind)))
    if origin is tuple:
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    if kind is bool:
        if raw.lower() in _TRUE:
            return True
        if raw.lower() in _FALSE:
            return False
        raise SettingError(f"{label}={raw!r} is not a boolean (use true or false)")
    if kind in (int, float):
        try:
            value = kind(raw)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise SettingError(f"{label}={raw!r} is not {what}") from None
        if minimum is not None and value < minimum:
            raise SettingError(f"{label}={value} must be at least {_text(minimum)}")
        return value
    return raw


def _choice(raw: str, label: str, choices: tuple[str, ...]) -> str:
    """The choice ``raw`` names (in any case), or a SettingError listing the choices."""
    for choice in choices:
        if raw.lower() == choice.lower():
            return choice
    raise SettingError(f"{label}={raw!r}: use one of {', '.join(choices)}")
