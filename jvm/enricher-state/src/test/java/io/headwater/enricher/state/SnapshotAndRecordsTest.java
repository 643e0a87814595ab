package io.headwater.enricher.state;

import static io.headwater.enricher.state.Fixtures.NOW;
import static io.headwater.enricher.state.Fixtures.batch;
import static io.headwater.enricher.state.Fixtures.deadLetters;
import static io.headwater.enricher.state.Fixtures.master;
import static io.headwater.enricher.state.Fixtures.policy;
import static io.headwater.enricher.state.Fixtures.role;
import static io.headwater.enricher.state.Fixtures.telemetry;
import static org.junit.jupiter.api.Assertions.assertEquals;

import headwater.events.v1.DeadLetterOuterClass.DeadLetter;
import headwater.events.v1.DeviceStateOuterClass.DeviceState;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.apache.spark.sql.Row;
import org.junit.jupiter.api.Test;

/** The device snapshot's bounds, and what the records carry of their source. */
class SnapshotAndRecordsTest {
  private static DeviceState state(List<Row> out) {
    List<Row> states = role(out, "state");
    assertEquals(1, states.size());
    return Fixtures.parse(() -> DeviceState.parseFrom((byte[]) states.get(0).get(2)));
  }

  private static Message measuring(String id, long seq, String... names) {
    Message m = telemetry(id, seq);
    m.measurements.clear();
    for (String n : names) {
      m.measurements.add(new Message.Measurement(n, 1.0, "celsius", null));
    }
    return m;
  }

  @Test
  void theSnapshotKeepsAtMostTheCapAndCountsTheRest() {
    Policy p = policy("max_latest_values=3\n");
    MemoryDeviceStore store = new MemoryDeviceStore();
    batch(p, store, NOW, master(), measuring("m-1", 1, "a", "b", "c", "d", "e"));
    // Kept names update; new ones past the cap, and names over 128 characters, are dropped.
    DeviceState s = state(batch(p, store, NOW + 1, measuring("m-2", 2, "a", "x".repeat(200))));
    assertEquals(List.of("a", "b", "c"),
        s.getLatestValuesList().stream().map(v -> v.getName()).toList());
    assertEquals(3, s.getLatestValuesDropped());
    // The dropped count survives the round trip through the state value.
    assertEquals(3, DeviceValue.decode(store.device).snapshot.dropped);
  }

  @Test
  void theSnapshotsTenantComesFromTheKeyNotTheMessage() {
    MemoryDeviceStore store = new MemoryDeviceStore();
    Message m = telemetry("m-1", 1);
    m.tenant = "intruder";
    assertEquals("acme", state(batch(policy(""), store, NOW, master(), m)).getTenant());
  }

  @Test
  void aRecordsRefIsItsSourceCoordinate() {
    // The sink parses it back (unproducible.source_of_ref) to dead-letter a refused record.
    Message m = telemetry("m-1", 7);
    m.srcPartition = 3;
    assertEquals("ingest.telemetry.v1/3/7", m.ref());
  }

  @Test
  void theHistoryKeepsEveryRedriveOldestFirst() {
    Message m = telemetry("m-1", 1);
    String[][] headers = {
      {"redrive-by", "alice"}, {"redrive-at-ms", "1700000000000"},
      {"redrive-reason", "normalizer fixed"}, {"redrive-by", "bob"},
      {"redrive-at-ms", "1700000100000"}, {"redrive-reason", "master data added"},
      {"redrive-count", "2"},
    };
    for (String[] h : headers) {
      m.headers.add(new Message.Header(h[0], h[1].getBytes(StandardCharsets.UTF_8)));
    }
    m.errorStage = "decode";
    m.errorReason = "ENVELOPE_INVALID";
    m.errorClass = "ValidationError";
    m.errorMessage = "bad";
    DeadLetter d = deadLetters(batch(policy(""), new MemoryDeviceStore(), NOW, master(), m)).get(0);
    assertEquals(List.of("alice", "bob"), d.getRedrivesList().stream().map(r -> r.getBy()).toList());
    assertEquals(List.of("normalizer fixed", "master data added"),
        d.getRedrivesList().stream().map(r -> r.getReason()).toList());
    assertEquals(1_700_000_100_000L, d.getRedrives(1).getRedrivenTime().getSeconds() * 1000);
    assertEquals(List.of(), Records.redrives(telemetry("m-2", 2)));
  }
}
