"""The command parts' instruments: counters, the delivery histogram and the gauges."""

from __future__ import annotations

from opentelemetry.metrics import Meter, Observation

from headwater.runtime.telemetry import SECONDS_BUCKETS

from .book import CommandBook
from .delivery import CommandDelivery
from .owners import OwnerBook


class CommandMetrics:
    """Instruments of command delivery; names carry their unit.

    Prometheus: headwater_ingest_commands_queued_total, headwater_ingest_commands_delivered_total,
    headwater_ingest_commands_expired_total, headwater_ingest_commands_duplicate_total,
    headwater_ingest_commands_refused_total,
    headwater_ingest_command_reports_total, headwater_ingest_command_outcomes_total,
    headwater_ingest_command_delivery_duration_seconds,
    headwater_ingest_commands_waiting, headwater_ingest_command_streams,
    headwater_ingest_command_owner_changes_total, headwater_ingest_command_owned_devices.
    """

    def __init__(
        self, meter: Meter, book: CommandBook, owners: OwnerBook, delivery: CommandDelivery
    ) -> None:
        self.queued = meter.create_counter(
            "headwater.ingest.commands.queued",
            unit="{command}",
            description="Commands read from commands.v1 and waiting for delivery",
        )
        self.duplicates = meter.create_counter(
            "headwater.ingest.commands.duplicate",
            unit="{command}",
            description="Records of commands.v1 whose command id was known: not delivered again",
        )
        self.refused = meter.create_counter(
            "headwater.ingest.commands.refused",
            unit="{command}",
            description="Commands read from commands.v1 that fail the checks of delivery "
            "(size, contract, key): REJECTED, never delivered",
        )
        self.delivered = meter.create_counter(
            "headwater.ingest.commands.delivered",
            unit="{command}",
            description="Commands acknowledged by their gateway on this replica",
        )
        self.expired = meter.create_counter(
            "headwater.ingest.commands.expired",
            unit="{command}",
            description="Commands past their expiry before delivery, marked EXPIRED",
        )
        self.reports = meter.create_counter(
            "headwater.ingest.command.reports",
            unit="{report}",
            description="Gateway reports relayed (reason empty) or dropped (reason set)",
        )
        # Not counted with the reports: a command's outcome usually comes both ways (the
        # stream's fast copy, the spool's durable one); each counter counts it once.
        self.outcomes = meter.create_counter(
            "headwater.ingest.command.outcomes",
            unit="{outcome}",
            description="Outcomes sent on command streams: written (reason empty) or refused",
        )
        self.delivery_duration = meter.create_histogram(
            "headwater.ingest.command.delivery.duration",
            unit="s",
            description="Time from a command's created_time to its gateway's acknowledgement",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        meter.create_observable_gauge(
            "headwater.ingest.commands.waiting",
            [lambda _o: [Observation(book.size)]],
            unit="{command}",
            description="Commands in this replica's book: not yet delivered nor expired",
        )
        self.owner_changes = meter.create_counter(
            "headwater.ingest.command.owner.changes",
            unit="{device}",
            description="Devices taken by a gateway: the first owner (kind=first) or another "
            "bound gateway after the owner's grace (kind=failover)",
        )
        meter.create_observable_gauge(
            "headwater.ingest.command.owned_devices",
            [lambda _o: [Observation(owners.size)]],
            unit="{device}",
            description="Devices whose commands lease this replica holds",
        )
        meter.create_observable_gauge(
            "headwater.ingest.command.streams",
            [lambda _o: [Observation(delivery.open_streams)]],
            unit="{stream}",
            description="Open ReceiveCommands streams on this replica",
        )
