"""The pure parts of admission: quotas on a fake clock, the estimate, settings, tokens file."""

from __future__ import annotations

import pytest

from headwater.gateway.config import GatewayConfig
from headwater.ingest.admission import (
    MIN_RECORD_BYTES,
    RECORD_HEADER_BYTES,
    Admission,
    ProduceTimeEstimate,
    producer_queue_limits,
    transport_options,
)
from headwater.ingest.auth import ANONYMOUS, Gateway, TokensFileError, parse_tokens
from headwater.ingest.errors import OverloadedError
from headwater.ingest.quotas import GatewayQuotas
from headwater.ingest.settings import GATEWAY_FRAME_TIMEOUT_SECONDS, IngestSettings
from headwater.runtime.env import SettingError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


GW = Gateway("gw-1", "t", ("*",))


def test_rate_allows_a_burst_then_refuses_until_the_debt_is_paid():
    clock = Clock()
    quotas = GatewayQuotas(1000, 0, 0.25, clock)
    quotas.check(GW, 3000)  # a full bucket lets one large call through...
    quotas.take(GW, 3000)
    with pytest.raises(OverloadedError) as err:  # ...and it is paid back before the next
        quotas.check(GW, 10)
    assert err.value.limit == "gateway_rate_bytes_per_second"
    assert err.value.retry_delay_s == pytest.approx(2.0)
    clock.now += 2.01
    quotas.check(GW, 10)


def test_a_refused_check_costs_no_tokens():
    clock = Clock()
    quotas = GatewayQuotas(1000, 500, 0.25, clock)
    quotas.take(GW, 400)
    for _ in range(5):
        with pytest.raises(OverloadedError) as err:
            quotas.check(GW, 200)
        assert err.value.limit == "gateway_max_inflight_bytes"
    quotas.give(GW, 400)
    quotas.check(GW, 200)  # 600 tokens left: never spent by the refusals


def test_in_flight_share_always_admits_a_gateway_holding_nothing():
    quotas = GatewayQuotas(0, 100, 0.25, Clock())
    quotas.check(GW, 10_000)
    quotas.take(GW, 10_000)
    with pytest.raises(OverloadedError):
        quotas.check(GW, 1)
    quotas.give(GW, 10_000)
    assert quotas.inflight_by_gateway() == {"gw-1": 0}


def test_tokens_file_overrides_win_and_zero_turns_a_limit_off():
    quotas = GatewayQuotas(1000, 100, 0.25, Clock())
    custom = Gateway("gw-2", "t", ("*",), rate_bytes_per_second=0, max_inflight_bytes=50)
    assert quotas.limits_of(custom) == (0, 50)
    assert quotas.limits_of(GW) == (1000, 100)
    for _ in range(10):
        quotas.check(custom, 10_000)
        quotas.take(custom, 10_000)
        quotas.give(custom, 10_000)


def test_anonymous_callers_get_only_the_process_bounds():
    quotas = GatewayQuotas(1, 1, 0.25, Clock())
    for _ in range(10):
        quotas.check(ANONYMOUS, 10_000)
        quotas.take(ANONYMOUS, 10_000)
    assert quotas.inflight_by_gateway() == {}


def test_process_bound_books_nothing_when_it_refuses():
    admission = Admission(
        IngestSettings(
            max_inflight_bytes=1000,
            gateway_rate_bytes_per_second=1_000_000,
            gateway_max_inflight_bytes=0,
        )
    )
    ticket = admission.admit(GW, 800)
    with pytest.raises(OverloadedError) as err:
        admission.admit(GW, 300)
    assert (err.value.limit, err.value.subject) == ("max_inflight_bytes", "ingest-process")
    assert admission.in_use == 800
    ticket.release()
    ticket.release()  # idempotent: a ticket gives back its bytes once
    assert admission.in_use == 0
    admission.admit(GW, 1000).release()


def test_room_is_checked_before_the_body_from_the_usual_request_size():
    admission = Admission(
        IngestSettings(
            max_inflight_bytes=1000,
            gateway_rate_bytes_per_second=0,
            gateway_max_inflight_bytes=0,
        )
    )
    admission.check_room(GW)  # nothing seen yet: only a full process refuses
    for _ in range(60):  # requests of 300 bytes teach the estimate
        admission.admit(GW, 300).release()
    assert admission.typical_request == pytest.approx(300, rel=0.01)
    held = admission.admit(GW, 600)
    admission.check_room(GW)  # 600 + 300 fits
    admission.reading = 1  # another body of ~300 is being read
    with pytest.raises(OverloadedError) as err:
        admission.check_room(GW)
    assert (err.value.limit, err.value.subject) == ("max_inflight_bytes", "ingest-process")
    assert admission.in_use == 600, "the check booked bytes"
    admission.reading = 0
    held.release()


def test_the_gateway_share_is_checked_before_the_body_too():
    admission = Admission(
        IngestSettings(max_inflight_bytes=10_000, gateway_max_inflight_bytes=1000)
    )
    held = admission.admit(GW, 900)  # typical request now ~90 B: 900 + 90 fits
    admission.check_room(GW)
    other = admission.admit(GW, 100)
    with pytest.raises(OverloadedError) as err:
        admission.check_room(GW)
    assert (err.value.limit, err.value.subject) == ("gateway_max_inflight_bytes", "gateway:gw-1")
    held.release()
    other.release()


def test_pending_calls_bound_reaches_grpc_core():
    options = dict(transport_options(IngestSettings(max_pending_calls=5)))
    assert options["grpc.server.max_pending_requests"] == 5
    assert options["grpc.server.max_pending_requests_hard_limit"] == 10


def test_slots_refuse_beyond_their_limit_and_are_counted_apart():
    admission = Admission(IngestSettings(max_concurrent_rpcs=1, max_streams=1))
    admission.enter_rpc()
    admission.enter_stream()
    with pytest.raises(OverloadedError, match="HEADWATER_INGEST_MAX_CONCURRENT_RPCS"):
        admission.enter_rpc()
    with pytest.raises(OverloadedError, match="HEADWATER_INGEST_MAX_STREAMS"):
        admission.enter_stream()
    admission.leave_rpc()
    admission.enter_rpc()


def test_deadline_check_uses_the_floor_and_the_recent_produce_time():
    admission = Admission(IngestSettings(min_deadline_ms=100))
    admission.check_deadline(None)
    admission.check_deadline(0.2)
    with pytest.raises(OverloadedError) as err:
        admission.check_deadline(0.05)
    assert err.value.limit == "min_deadline_ms"
    for _ in range(30):
        admission.produce_time.record(2.0)
    with pytest.raises(OverloadedError):
        admission.check_deadline(1.0)


def test_produce_time_estimate_decays_when_nothing_finishes():
    clock = Clock()
    estimate = ProduceTimeEstimate(clock)
    for _ in range(50):
        estimate.record(4.0)
    assert estimate.value() == pytest.approx(4.0, rel=0.01)
    clock.now += 10  # e.g. a broker stall: no produce finished, none refused forever
    assert estimate.value() < 0.01


def test_producer_queue_limits_follow_the_in_flight_bound():
    size, records = producer_queue_limits(8 * 1024 * 1024)
    assert records == 8 * 1024 * 1024 // MIN_RECORD_BYTES
    assert size == 8 * 1024 * 1024 + records * RECORD_HEADER_BYTES
    assert producer_queue_limits(16 * 1024 * 1024)[0] > size


def test_stream_frame_deadline_is_below_the_gateways_frame_timeout():
    assert GatewayConfig(target="x").call_timeout_s == GATEWAY_FRAME_TIMEOUT_SECONDS
    assert IngestSettings().stream_frame_timeout_seconds < GATEWAY_FRAME_TIMEOUT_SECONDS


def test_new_settings_are_read_from_the_environment():
    s = IngestSettings.from_env(
        {
            "HEADWATER_INGEST_ALLOW_UNAUTHENTICATED": "true",
            "HEADWATER_INGEST_MAX_STREAMS": "7",
            "HEADWATER_INGEST_STREAM_FRAME_TIMEOUT_SECONDS": "3.5",
            "HEADWATER_INGEST_MIN_DEADLINE_MS": "20",
            "HEADWATER_INGEST_GATEWAY_RATE_BYTES_PER_SECOND": "0",
            "HEADWATER_INGEST_GATEWAY_MAX_INFLIGHT_BYTES": "1048576",
            "HEADWATER_INGEST_MAX_PENDING_CALLS": "9",
        }
    )
    assert s.max_pending_calls == 9
    assert (s.max_streams, s.stream_frame_timeout_seconds, s.min_deadline_ms) == (7, 3.5, 20)
    assert (s.gateway_rate_bytes_per_second, s.gateway_max_inflight_bytes) == (0, 1048576)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"HEADWATER_INGEST_MAX_STREAMS": "0"}, "must be at least 1"),
        ({"HEADWATER_INGEST_MAX_PENDING_CALLS": "0"}, "must be at least 1"),
        ({"HEADWATER_INGEST_GATEWAY_RATE_BYTES_PER_SECOND": "-1"}, "must be at least 0"),
        ({"HEADWATER_INGEST_GATEWAY_MAX_INFLIGHT_BYTES": str(2**30)}, "share cannot be larger"),
        ({"HEADWATER_INGEST_STREAM_FRAME_TIMEOUT_SECONDS": "soon"}, "is not a number"),
    ],
)
def test_bad_overload_settings_are_refused_with_a_clear_message(env, message):
    with pytest.raises(SettingError, match=message):
        IngestSettings.from_env({"HEADWATER_INGEST_ALLOW_UNAUTHENTICATED": "true", **env})


def test_tokens_file_limits_are_parsed_and_checked():
    gateways = parse_tokens(
        """
gateways:
  - {id: a, tenant: t, devices: ["*"], rate_bytes_per_second: 500, max_inflight_bytes: 0}
  - {id: b, tenant: t, devices: ["*"]}
"""
    )
    assert (gateways["a"].rate_bytes_per_second, gateways["a"].max_inflight_bytes) == (500, 0)
    assert (gateways["b"].rate_bytes_per_second, gateways["b"].max_inflight_bytes) == (None, None)
    for bad in ("-1", "1.5", "true", "lots"):
        with pytest.raises(TokensFileError, match="rate_bytes_per_second"):
            parse_tokens(f"gateways: [{{id: a, tenant: t, rate_bytes_per_second: {bad}}}]")
