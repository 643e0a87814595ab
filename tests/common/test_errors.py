"""One error root: every error the production libraries raise on purpose is a HeadwaterError."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

from headwater.errors import HeadwaterError
from headwater.gateway.errors import CallFailedError, SpoolFullError
from headwater.runtime.env import SettingError
from headwater.subscriber.errors import DeadLetterTopicError, SubscriberError
from tests.support.libraries import library_modules


def _errors_defined_in(module_name: str) -> list[type[BaseException]]:
    module = importlib.import_module(module_name)
    return [
        cls
        for cls in vars(module).values()
        if inspect.isclass(cls) and issubclass(cls, BaseException) and cls.__module__ == module_name
    ]


def test_the_libraries_define_errors_and_each_is_a_headwater_error():
    errors = [cls for name in library_modules() for cls in _errors_defined_in(name)]
    assert len(errors) >= 20, errors  # the walk sees them (a broken walk would pass vacuously)
    outside = [
        f"{c.__module__}.{c.__qualname__}" for c in errors if not issubclass(c, HeadwaterError)
    ]
    assert outside == []


def test_the_root_module_imports_nothing_so_every_part_can_stand_on_it():
    tree = ast.parse(inspect.getsource(importlib.import_module("headwater.errors")))
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    assert [getattr(n, "module", None) for n in imports] == ["__future__"]


@pytest.mark.parametrize(
    ("error", "retriable"),
    [
        (SettingError("HEADWATER_X='y' is not an integer"), False),
        (SubscriberError("stop"), False),
        (DeadLetterTopicError("t.deadletter.v1", "missing"), True),
        (SpoolFullError(Path("s"), 10, 100, 5), True),
        (SpoolFullError(Path("s"), 10, 100, 500), False),
    ],
)
def test_retriable_says_whether_trying_again_unchanged_may_work(error, retriable):
    assert isinstance(error, HeadwaterError)
    assert error.retriable is retriable


def test_errors_callers_caught_as_builtins_still_are():
    assert issubclass(SettingError, ValueError)
    assert issubclass(SubscriberError, RuntimeError)
    assert CallFailedError.retriable is True


#: The services and the dev tooling.
SERVICE_PACKAGES = ("headwater.ingest", "headwater.enricher", "headwater_dev")
#: Not errors: control flow never seen by a caller (a stop; the CPU budget's interruption, a
#: BaseException so that a normalizer's ``except Exception`` cannot swallow it).
SIGNALS = {
    "headwater_dev.devstack.supervisor._Stopped",
    "headwater.enricher.hop.budget.BudgetExceeded",
    "headwater.enricher.hop.budget.CpuBudgetExceeded",
}
#: Old import paths that warn when imported (they re-export, define nothing).
DEPRECATED_PATHS = {"headwater.enricher.formats", "headwater.enricher.normalize"}


def _modules_of(package: str) -> list[str]:
    path = importlib.import_module(package).__path__
    names = [package, *(m.name for m in pkgutil.walk_packages(path, package + "."))]
    return [name for name in names if name not in DEPRECATED_PATHS]


def test_the_services_and_dev_tooling_errors_are_headwater_errors():
    names = [name for package in SERVICE_PACKAGES for name in _modules_of(package)]
    errors = [cls for name in names for cls in _errors_defined_in(name)]
    assert len(errors) >= 25, errors  # the walk sees them
    assert {"EnricherError", "NormalizeError", "UnitError"} <= {c.__name__ for c in errors}
    outside = [
        f"{c.__module__}.{c.__qualname__}" for c in errors if not issubclass(c, HeadwaterError)
    ]
    assert sorted(outside) == sorted(SIGNALS)


def test_the_ingest_and_dev_errors_callers_catch_as_builtins_still_are():
    from headwater.ingest.admission.auth import TokensFileError
    from headwater.ingest.rpc.tls import TlsFilesError
    from headwater.ingest.writers.produce_errors import Kind, ProduceError
    from headwater_dev.devstack.processes import PartFailedError
    from headwater_dev.devstack.status_file import StackRunningError

    assert issubclass(TokensFileError, ValueError)
    assert issubclass(TlsFilesError, RuntimeError)
    assert issubclass(PartFailedError, RuntimeError) and issubclass(StackRunningError, RuntimeError)
    assert ProduceError(Kind.RETRIABLE, "broker down").retriable is True
    assert ProduceError(Kind.TIMEOUT, "no ack").retriable is True
    assert ProduceError(Kind.TOO_LARGE, "too big").retriable is False


def test_the_enricher_errors_keep_their_names_and_builtin_bases():
    from headwater.enricher.errors import EnricherError, KafkaDeliveryError
    from headwater.enricher.hop.budget import CpuBudgetExceeded, SizeBudgetExceeded
    from headwater.enricher.hop.media_type import MediaTypeError
    from headwater.enricher.hop.units import UnitError
    from headwater.enricher.plugins import NormalizeError

    assert issubclass(EnricherError, HeadwaterError)
    for error in (NormalizeError, MediaTypeError, UnitError):
        assert issubclass(error, EnricherError) and issubclass(error, ValueError), error
    assert issubclass(SizeBudgetExceeded, EnricherError)
    assert KafkaDeliveryError(1, "timed out").retriable is True
    assert NormalizeError("PAYLOAD_INVALID", "bad").retriable is False
    # The interruption stays out of reach of a normalizer's ``except Exception``.
    assert not issubclass(CpuBudgetExceeded, Exception)
