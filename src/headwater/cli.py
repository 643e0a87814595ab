"""The ``headwater`` command: one subcommand group per job.

Each group registers itself from its own package and imports its heavy dependencies
(Spark, gRPC, Kafka clients) only when it runs, so ``headwater --help`` stays fast and
works with any extra installed. A group whose package needs an extra that is not
installed is still listed; running it says which extra to install.

The dev tooling (``headwater devstack``, ``headwater bench``) is not in this distribution:
``headwater-dev`` (``dev/`` in the repository) adds those groups through the entry-point
group ``headwater.commands``. Without it they are still listed and say how to install it.

A command that cannot start (a bad setting, a missing file, no Java) ends with one line
on stderr and exit status 2, not a traceback (:class:`headwater.runtime.startup.StartupError`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
from collections.abc import Callable, Iterator, Sequence
from importlib import metadata

#: Modules that provide ``register(subparsers)``, in the order shown by --help, with the
#: extra that brings what they need and the command names they register.
COMMAND_MODULES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("headwater.ingest.cli", "ingest", ("ingest",)),
    ("headwater.enricher.driver.cli", "enricher", ("enricher",)),
    ("headwater.enricher.driver.normalize_cli", "enricher", ("normalize",)),
    ("headwater.ops.topics", "ops", ("topics",)),
    ("headwater.ops.cli", "ops", ("dlq", "offsets", "lag", "status")),
    ("headwater.master.cli", "ops", ("master",)),
    ("headwater.commands.cli", "ops", ("command",)),
    ("headwater.gateway.cli", "gateway", ("gateway",)),
)

#: Where other distributions add command groups: each entry is named after its group and
#: points at a ``register(subparsers)`` like the modules above (dev/pyproject.toml).
ENTRY_POINT_GROUP = "headwater.commands"
#: The groups headwater-dev adds (the dev tooling): listed first (``make run`` is where a
#: newcomer starts), and even when it is not installed.
DEV_COMMANDS = ("devstack", "bench", "chaos")
DEV_INSTALL = "make install, or pip install -e ./dev in a checkout"
#: Top-level packages of our own: one of them missing is a packaging bug, not a missing extra.
OWN_PACKAGES = ("headwater", "headwater_dev")


def version() -> str:
    """Return the installed version of Headwater ("unknown" when run from a bare checkout)."""
    try:
        return metadata.version("headwater")
    except metadata.PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """Return the parser with every command group registered."""
    parser = argparse.ArgumentParser(
        prog="headwater",
        description=(
            "Headwater: device data from edge gateways over gRPC into Kafka, and out again "
            "as enriched common-format events."
        ),
    )
    parser.add_argument("--version", action="version", version=f"headwater {version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _register_added(subparsers)
    for module, extra, commands in COMMAND_MODULES:
        with _listed_if_missing(subparsers, commands, extra):
            importlib.import_module(module).register(subparsers)
    return parser


def _register_added(subparsers: argparse._SubParsersAction) -> None:
    """The groups other distributions add (headwater-dev's first), or how to install them."""
    added = {entry.name: entry for entry in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    for name in (*DEV_COMMANDS, *sorted(added.keys() - set(DEV_COMMANDS))):
        if name not in added:
            _register_unavailable(
                subparsers,
                name,
                f"(not installed: headwater-dev; {DEV_INSTALL})",
                f"needs headwater-dev, the dev tooling (not installed): {DEV_INSTALL}",
            )
            continue
        with _listed_if_missing(subparsers, (name,), "dev"):
            added[name].load()(subparsers)


@contextlib.contextmanager
def _listed_if_missing(
    subparsers: argparse._SubParsersAction, commands: Sequence[str], extra: str
) -> Iterator[None]:
    """Register in the block; if a library it needs is missing, list ``commands`` anyway.

    Only module imports and the entry points' metadata run at registration (each group
    imports its heavy libraries when it runs), so ``headwater --help`` stays fast.
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        if not exc.name or exc.name.split(".")[0] in OWN_PACKAGES:
            raise  # our own module missing is a packaging bug, not a missing extra
        _register_missing(subparsers, commands, extra, exc.name)


def _register_missing(
    subparsers: argparse._SubParsersAction, commands: Sequence[str], extra: str, missing: str
) -> None:
    """List ``commands`` anyway; running one says which extra brings ``missing``."""
    for name in commands:
        _register_unavailable(
            subparsers,
            name,
            f"(not installed: pip install 'headwater[{extra}]')",
            _needs_extra(extra, missing),
        )


def _register_unavailable(
    subparsers: argparse._SubParsersAction, name: str, help_text: str, reason: str
) -> None:
    """List ``name`` with ``help_text``; running it prints ``reason`` in one line, exit 2."""
    cmd = subparsers.add_parser(name, help=help_text, description=reason[:1].upper() + reason[1:])
    cmd.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    cmd.set_defaults(func=_refuse(name, reason))


def _needs_extra(extra: str, module: str) -> str:
    return f"needs the {extra} extra ({module} is not installed): pip install 'headwater[{extra}]'"


def _refuse(name: str, reason: str) -> Callable[[argparse.Namespace], int]:
    def run(_args: argparse.Namespace) -> int:
        print(f"headwater {name}: {reason}", file=sys.stderr)
        return 2

    return run


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``headwater`` command; start-up failures end in one line on stderr, exit 2."""
    from headwater.runtime.env import SettingError
    from headwater.runtime.jvm import JvmSetupError
    from headwater.runtime.startup import StartupError

    parser = build_parser()
    # A command that hands its arguments to another program's parser (``bench enricher``)
    # sets ``forward_args``; anywhere else an unknown argument is an error, as with
    # parse_args.
    args, rest = parser.parse_known_args(argv)
    if getattr(args, "forward_args", False):
        args.forwarded = rest
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        return int(args.func(args) or 0)
    except (StartupError, SettingError, JvmSetupError) as exc:
        print(f"headwater {_command_of(args)}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM (headwater.runtime.signals) ended the run
        print(f"headwater {_command_of(args)}: stopped", file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:
        # A group registers with the standard library only; what it runs may need an extra.
        if not exc.name or exc.name.split(".")[0] in OWN_PACKAGES:
            raise
        return _refuse(_command_of(args), _needs_extra(_extra_of(args.command), exc.name))(args)


def _extra_of(command: str) -> str:
    """The extra that brings what ``command`` needs."""
    for _module, extra, commands in COMMAND_MODULES:
        if command in commands:
            return extra
    return "dev"


def _command_of(args: argparse.Namespace) -> str:
    """The words of the command that ran, e.g. ``ingest serve``."""
    words = [args.command]
    sub = getattr(args, f"{args.command}_command", None)
    if isinstance(sub, str):
        words.append(sub)
    return " ".join(words)


if __name__ == "__main__":
    sys.exit(main())
