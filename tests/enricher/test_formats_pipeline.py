"""End to end with every vendor format: real broker, real local Spark, the enricher's query.

Sparkplug B goes through the keyed state: the DBIRTH defines aliases, units and types, the
DDATA after it sends aliases and values only; an alias no birth defined is a dead letter.
"""

from __future__ import annotations

import pytest

from headwater.proto.events.v1 import dead_letter_pb2, event_pb2
from tests.support.enricher import alive, settings_for
from tests.support.kafkatools import (
    ACME,
    ALARM,
    GLOBEX,
    INITECH,
    Msg,
    TopicReader,
    completions,
    ingest,
    make_topics,
    masters,
    outcome,
    read_all,
)
from tests.support.payloads import BIRTH, DBIRTH, DDATA, OPCUA
from tests.support.payloads import opcua_network as _network
from tests.support.payloads import sparkplug_metric as _metric
from tests.support.payloads import sparkplug_payload as _payload

pytestmark = [pytest.mark.spark, pytest.mark.slow]

T0 = 1_700_000_000_000


def test_every_format_end_to_end(kafka_bootstrap: str, running, tmp_path) -> None:
    topics = make_topics(kafka_bootstrap)
    masters(kafka_bootstrap, topics, ["d-acme", "d-globex", "d-initech", "d-spb", "d-opc"])
    ddata = _payload(
        _metric(alias=1, ts=T0 + 5_000, float_value=212.0),
        _metric(alias=2, double_value=1000.0),
        ts=T0 + 1_000,
    )
    opc = _network(
        {
            "DataSetWriterId": 1,
            "Timestamp": "2023-11-14T22:13:20Z",
            "Payload": {
                "Temperature": {"Type": 11, "Body": 21.5},
                "Broken": {"Value": {"Type": 11, "Body": 1.0}, "Status": 0x808B0000},
            },
        },
        {"DataSetWriterId": 2, "Payload": {"Level": {"UaType": 10, "Value": 0.5}}},
    )
    msgs = [
        Msg("a1", "d-acme", ACME.upper() + "; charset=UTF-8", b'\xef\xbb\xbf{"temp_c": 21.5}', 1),
        Msg(
            "g1", "d-globex", GLOBEX, b'{"readings": [{"k": "pressure", "v": 1013.25, "u": "hPa"}]}'
        ),
        Msg("i1", "d-initech", INITECH, b" 294.65 , 0.401 , 3300\r\n"),
        Msg(
            "al", "d-acme", ALARM, b'{"code": "E42", "severity": "critical"}', 2, endpoint="alarms"
        ),
        Msg("s1", "d-spb", DBIRTH, BIRTH, 1),
        Msg("s2", "d-spb", DDATA, ddata, 2),
        Msg("s3", "d-spb", DDATA, _payload(_metric(alias=99, double_value=1.0)), 3),
        Msg("o1", "d-opc", OPCUA, opc),
        Msg("n1", "d-acme", ACME, b'{"temp_c": NaN}', 3),
        Msg("c1", "d-acme", "application json", b"{}", 4),
    ]
    ingest(kafka_bootstrap, topics, msgs)
    q = running(settings_for(kafka_bootstrap, topics, str(tmp_path / "cp")))
    reader = TopicReader(kafka_bootstrap, topics.completions)
    reader.until(lambda r: len(r) >= len(msgs), 180, alive(q))
    got = {c.message_id: (outcome(c), c.reason) for c in completions(reader.records)}
    assert got == {
        "a1": ("OUTCOME_ENRICHED", ""),
        "g1": ("OUTCOME_ENRICHED", ""),
        "i1": ("OUTCOME_ENRICHED", ""),
        "al": ("OUTCOME_ENRICHED", ""),
        "s1": ("OUTCOME_ENRICHED", ""),
        "s2": ("OUTCOME_ENRICHED", ""),
        "s3": ("OUTCOME_DEAD_LETTERED", "PAYLOAD_INVALID"),
        "o1": ("OUTCOME_ENRICHED", ""),
        "n1": ("OUTCOME_DEAD_LETTERED", "PAYLOAD_INVALID"),
        "c1": ("OUTCOME_DEAD_LETTERED", "CONTENT_TYPE_INVALID"),
    }
    events = {}
    for topic in (topics.event_topic("telemetry"), topics.event_topic("alarm")):
        for m in read_all(kafka_bootstrap, topic):
            e = event_pb2.Event.FromString(m.value())
            events[e.message_id] = e

    def ms(mid: str) -> list[tuple[str, float, str, int]]:
        return [
            (m.name, m.value, m.unit, m.time.ToMilliseconds() if m.HasField("time") else 0)
            for m in events[mid].measurements
        ]

    assert ms("a1") == [("temperature", 21.5, "celsius", 0)]
    assert ms("g1") == [("pressure", 101325.0, "pascal", 0)]
    assert ms("i1") == [
        ("temperature", 21.5, "celsius", 0),
        ("humidity", 40.1, "percent", 0),
        ("voltage", 3.3, "volt", 0),
    ]
    assert events["al"].alarm.code == "E42"
    assert ms("s1")[:2] == [("Temp", 21.5, "celsius", T0), ("Pressure", 101325.0, "pascal", T0)]
    assert ms("s2") == [
        ("Temp", 100.0, "celsius", T0 + 5_000),  # per-metric timestamp
        ("Pressure", 100000.0, "pascal", T0 + 1_000),  # name and unit from the DBIRTH
    ]
    assert events["s2"].source_format == "sparkplug.b+protobuf"
    assert ms("o1") == [("Temperature", 21.5, "", T0), ("Level", 0.5, "", 0)]
    dls = {
        d.message_id: d
        for d in (
            dead_letter_pb2.DeadLetter.FromString(m.value())
            for m in read_all(kafka_bootstrap, topics.deadletter)
        )
    }
    assert "alias 99 is not defined" in dls["s3"].error_message
    assert dls["n1"].error_message == "temperature: nan is not a finite number"
    assert dls["c1"].stage == "normalize"
    reader.close()
