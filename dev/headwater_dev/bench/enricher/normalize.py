"""Benchmark: the normalize step and what its budget adds per message, without Spark.

``python -m headwater_dev.bench.enricher.normalize`` runs ``normalize_message`` over
``--messages`` benchmark records (the records of ``query.py``) and prints CPU µs per message
(medians of ``--repeat`` runs): the whole step, the same normalizer called bare, and what the
budget (``budget.py``: the CPU timer armed and disarmed, the size checks) adds to each call.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from headwater_dev.bench.enricher.traffic import telemetry_record


def normalize_figures(messages: int, repeat: int) -> dict[str, float]:
    """Return CPU µs per message (medians of ``repeat`` runs) of normalize and its budget.

    ``normalize_message`` is the whole step; ``bare`` calls the same normalizer and
    ``columns`` (with its result size checks) directly; ``wrapper`` is the difference (the
    format lookup, the payload size check, ``budget.call``, the encodability pre-check),
    and ``timer`` the cost of ``budget.call`` around a call that does nothing: the CPU
    budget's own share.
    """
    from headwater.enricher.hop import budget as budgets
    from headwater.enricher.hop import media_type
    from headwater.enricher.hop.formats.registry import lookup
    from headwater.enricher.hop.normalize import columns, normalize_message
    from headwater.proto.device.v1 import device_message_pb2

    msgs = []
    for i in range(messages):
        _, value, _ = telemetry_record(i, 1000, "n", 0)
        dm = device_message_pb2.DeviceMessage.FromString(value)
        msgs.append((dm.content_type, dm.payload))
    b = budgets.current()
    fn = lookup(media_type.parse(msgs[0][0]).essence)
    assert fn is not None
    normalize_message(*msgs[0])  # first use: plugins, the units registry

    def whole() -> None:
        for ct, payload in msgs:
            normalize_message(ct, payload)

    def bare() -> None:
        for ct, payload in msgs:
            columns(fn(payload, media_type.parse(ct)), b)

    def timer() -> None:
        nothing = lambda: None  # noqa: E731
        for _ in msgs:
            budgets.call(b, nothing)

    # CPU time of this thread, and the variants taken in turns: on a shared machine the
    # wall clock and the order of long runs would say more about the neighbours.
    variants = {"normalize_message": whole, "bare": bare, "timer": timer}
    runs: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeat):
        for name, f in variants.items():
            t0 = time.thread_time()
            f()
            runs[name].append((time.thread_time() - t0) * 1e6 / messages)
    out = {name: statistics.median(r) for name, r in runs.items()}
    out["wrapper"] = out["normalize_message"] - out["bare"]
    return out


def main(argv: list[str] | None = None) -> int:
    """Print CPU µs per message of the normalize step, bare and with its budget."""
    parser = argparse.ArgumentParser(
        prog="python -m headwater_dev.bench.enricher.normalize",
        description=__doc__.split("\n")[0],
    )
    parser.add_argument("--messages", type=int, default=15_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    figures = normalize_figures(args.messages, args.repeat)
    print(
        f"{args.messages} messages, median µs/message: "
        + ", ".join(f"{k} {v:.2f}" for k, v in figures.items())
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
