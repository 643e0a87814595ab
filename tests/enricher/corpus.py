"""A fixed corpus of raw Kafka records for the JVM operator (tests/enricher/test_jvm_state.py).

The dev fleet's mix (every vendor format, Sparkplug B births then data by alias, alarms,
duplicates, poison, unknown formats, invalid envelopes, a device without master data) plus the
edge cases the formats' tests know (CSV spacing, BOMs, charsets, duplicate JSON names, non-finite
values, Sparkplug datatypes and bad payloads, OPC UA, rebirths). Built from fixed seeds and
times, so every run is the same corpus; rows have the Kafka source's columns (``RAW``).
"""

from __future__ import annotations

import random

from headwater import record_headers as rh
from headwater.proto.master.v1 import device_master_pb2
from headwater_dev.devstack import vendors
from tests.support.kafkatools import ACME, ALARM, GLOBEX, INITECH, Msg, envelope
from tests.support.payloads import BIRTH, DBIRTH, DDATA, OPCUA
from tests.support.payloads import opcua_network as _network
from tests.support.payloads import sparkplug_metric as _metric
from tests.support.payloads import sparkplug_payload as _payload

RAW = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int, headers array<struct<key:string,value:binary>>"
)
T0 = 1_700_000_000_000
TENANT = "acme-tenant"


class Corpus:
    """Raw rows on the given topics, with offsets per topic."""

    def __init__(self, ingest: tuple[str, ...], master_topic: str) -> None:
        self.telemetry, self.alarms = ingest[0], ingest[1]
        self.master_topic = master_topic
        self.rows: list[tuple] = []
        self._offsets: dict[str, int] = {}

    def _offset(self, topic: str) -> int:
        n = self._offsets.get(topic, 0)
        self._offsets[topic] = n + 1
        return n

    def master(self, device: str, site: str = "plant-1", value: bytes | None = None) -> None:
        if value is None:
            value = device_master_pb2.DeviceMaster(
                device_id=device, site=site, area_code="A1", tenant=TENANT
            ).SerializeToString()
        t = self.master_topic
        key = f"{TENANT}/{device}".encode()
        self.rows.append((key, value, t, 0, self._offset(t), None, 0, []))

    def message(
        self,
        m: Msg,
        extra_headers: list[tuple[str, bytes]] = (),
        value: bytes | None = None,
        key: str | None = None,
    ) -> None:
        topic = self.alarms if m.endpoint == "alarms" else self.telemetry
        headers = [
            (rh.MESSAGE_ID, m.message_id.encode()),
            (rh.GATEWAY_ID, b"gw-001"),
            (rh.TENANT, m.tenant.encode()),
            (rh.CONTENT_TYPE, m.content_type.encode()),
            (rh.RECEIVED_AT_MS, str(m.device_time_ms + 250).encode()),
            (rh.ENDPOINT, m.endpoint.encode()),
            (rh.TRACEPARENT, b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
            *extra_headers,
        ]
        value = envelope(m) if value is None else value
        k = (key if key is not None else m.device_id).encode()
        self.rows.append((k, value, topic, 0, self._offset(topic), None, 0, headers))


def dev_fleet(c: Corpus, devices: int = 10, per_device: int = 6, seed: int = 7) -> None:
    """The simulated fleet's mix (devstack/fleet.py's formats, bad and special messages)."""
    rng = random.Random(seed)
    for d in range(devices):
        device = f"acme-000-{d:04d}"
        fmt = vendors.TELEMETRY_FORMATS[d % len(vendors.TELEMETRY_FORMATS)]
        if d != devices - 1:  # the last device has no master data: parked
            c.master(device)
        for s in range(1, per_device + 1):
            t = T0 + d * 1000 + s * 10
            r = vendors.random_reading(rng)
            ct = fmt
            if fmt == vendors.SPARKPLUG_B:
                birth = s == 1
                ct = vendors.SPARKPLUG_BIRTH if birth else vendors.SPARKPLUG_DATA
                payload = vendors.sparkplug_payload(r, birth=birth, now_ms=t)
            elif fmt == vendors.OPCUA_PUBSUB:
                payload = vendors.opcua_payload(r, now_ms=t)
            else:
                payload = vendors.telemetry_payload(fmt, r)
            roll = rng.random()
            if roll < 0.1 and fmt != vendors.SPARKPLUG_B:
                payload = vendors.poison_payload(ct)
            m = Msg(f"{device}-m{s}", device, ct, payload, sequence=s, device_time_ms=t)
            c.message(m)
            if roll > 0.85:
                c.message(m)  # a resend: a duplicate
        alarm = Msg(
            f"{device}-a1",
            device,
            ALARM,
            vendors.alarm_payload(rng),
            per_device + 1,
            T0 + d * 1000 + 999,
            "alarms",
        )
        c.message(alarm)
    unknown = Msg("u-1", "acme-000-0000", "application/x-unknown", b"{}", 90, T0 + 5)
    c.message(unknown)
    # An envelope whose device is not its record key, and one that is not a DeviceMessage.
    c.message(Msg("k-1", "acme-000-0001", ACME, b'{"temp_c": 1}', 91, T0), key="acme-000-0002")
    c.message(Msg("x-1", "acme-000-0003", ACME, b""), value=b"\xff\xff\xff")
    # A redriven message (its own dedup key) and a master record that does not parse.
    first = Msg("r-1", "acme-000-0004", ACME, b'{"temp_c": 2}', 92, T0 + 7)
    c.message(first)
    c.message(
        first,
        [
            (rh.REDRIVE_BY, b"ops"),
            (rh.REDRIVE_REASON, b"fixed"),
            (rh.REDRIVE_AT_MS, b"1700000001000"),
            (rh.REDRIVE_COUNT, b"1"),
        ],
    )
    c.master("acme-000-0005", value=b"\xff\x01garbage")


def format_edges(c: Corpus) -> None:
    """The formats' edge cases (tests/enricher/test_formats.py) on devices with master data."""
    device = "edge-1"
    c.master(device)
    cases = [
        (INITECH, b"294.65,0.401,3300"),
        (INITECH, b"\xef\xbb\xbf294.65,0.401,3300\r\n"),
        (INITECH, b" 294.65 , 0.401 ,\t3300 \n"),
        (INITECH + "; charset=UTF-16", "294.65,0.401,3300\r\n".encode("utf-16")),
        (INITECH, "294.65,0.401,3300\r\n".encode("utf-16")),
        (INITECH + "; charset=klingon", b"1,2,3"),
        (ACME, b'\xef\xbb\xbf{"temp_c": 21.5}'),
        (ACME.upper() + "; charset=UTF-8", b'{"temp_c": 21.5}'),
        (ACME, b'{"temp_c": 21.5, "temp_c": 99}'),
        (ACME, b'{"temp_c": NaN}'),
        (ACME, b'{"temp_c": 1e999}'),
        (ACME, b'{"temp_c": "\\ud800"}'),
        (GLOBEX, b'{"readings": [{"k": "pressure", "v": 1013.25, "u": "hPa"}]}'),
        (GLOBEX, b'{"readings": [{"k": "pressure", "v": 1e308, "u": "kPa"}]}'),
        (
            GLOBEX,
            b'{"readings": [{"k": "t", "v": 70.7, "u": "F"}, {"k": "f", "v": 3, "u": "l/min"}]}',
        ),
        (ALARM, b'{"code": "E1", "severity": "WARNING", "text": "h\\u00e9"}'),
        (
            OPCUA,
            _network(
                {
                    "DataSetWriterId": 1,
                    "Timestamp": "2023-11-14T22:13:20Z",
                    "Payload": {
                        "Temperature": {"Type": 11, "Body": 21.5},
                        "Broken": {"Value": {"Type": 11, "Body": 1.0}, "Status": 0x808B0000},
                    },
                },
                {"DataSetWriterId": 2, "Payload": {"Level": {"UaType": 10, "Value": 0.5}}},
            ),
        ),
    ]
    for seq, (ct, payload) in enumerate(cases, start=1):
        endpoint = "alarms" if ct == ALARM else "telemetry"
        c.message(Msg(f"e-{seq}", device, ct, payload, seq, T0 + seq, endpoint))
    # Sparkplug B on its own device: a birth with every datatype, data by alias, bad payloads,
    # a rebirth with new aliases and a unit to convert, data after it.
    spb = "edge-spb"
    c.master(spb)
    sparkplug = [
        (DBIRTH, BIRTH),
        (
            DDATA,
            _payload(
                _metric(alias=1, float_value=212.0),
                _metric(alias=3, int_value=-7),
                _metric(alias=6, long_value=-9),
            ),
        ),
        (DDATA, _payload(_metric(alias=99, double_value=1.0))),
        (DDATA, _payload(_metric("x", double_value=float("nan")))),
        (DDATA, _payload(_metric("u", unit="wibbles", double_value=1.0))),
        (DDATA, _payload(_metric("t", ts=2**63, double_value=1.0))),
        (vendors.SPARKPLUG_B + "; message-type=BOGUS", _payload()),
        (DBIRTH, _payload(_metric("Flow", alias=1, datatype=10, unit="l/min", double_value=6))),
        (DDATA, _payload(_metric(alias=1, double_value=60.0))),
        (DDATA, _payload(_metric(alias=2, double_value=1.0))),  # alias 2 gone after the rebirth
    ]
    for i, (ct, payload) in enumerate(sparkplug, start=1):
        c.message(Msg(f"s-{i}", spb, ct, payload, i, T0 + 100 + i))


def corpus(ingest: tuple[str, ...], master_topic: str) -> list[tuple]:
    """Return the whole corpus as raw rows (``RAW``)."""
    c = Corpus(ingest, master_topic)
    dev_fleet(c)
    format_edges(c)
    return c.rows
