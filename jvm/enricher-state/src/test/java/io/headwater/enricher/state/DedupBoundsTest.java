package io.headwater.enricher.state;

import static io.headwater.enricher.state.Fixtures.NOW;
import static io.headwater.enricher.state.Fixtures.batch;
import static io.headwater.enricher.state.Fixtures.completions;
import static io.headwater.enricher.state.Fixtures.events;
import static io.headwater.enricher.state.Fixtures.master;
import static io.headwater.enricher.state.Fixtures.policy;
import static io.headwater.enricher.state.Fixtures.telemetry;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import headwater.events.v1.CompletionOuterClass.Completion;
import headwater.events.v1.CompletionOuterClass.Outcome;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.junit.jupiter.api.Test;

/** Both dedup tiers are bounded in ids, whatever a device's rate; past a bound the oldest go. */
class DedupBoundsTest {
  private static final long HOUR = Dedup.HOUR_MS;
  private static final long HORIZON = 7 * 24 * HOUR + HOUR;
  private static final long T0 = 1_800_000_000_000L;

  /** One device's dedup across batches, carrying its composite value's two fields. */
  private static final class Device {
    final DedupTest.MemoryOlder older = new DedupTest.MemoryOlder();
    final int maxRecent;
    final int maxPerHour;
    Dedup.Recent recent = Dedup.Recent.EMPTY;
    long[] spilled = new long[0];
    long forgotten;

    Device(int maxRecent, int maxPerHour) {
      this.maxRecent = maxRecent;
      this.maxPerHour = maxPerHour;
    }

    /** Returns firstTime of each id (all of device time {@code deviceTime}), then commits. */
    List<Boolean> batch(long nowMs, long deviceTime, String... ids) {
      Dedup d = new Dedup(older, HOUR, HORIZON, maxRecent, maxPerHour);
      d.begin(recent, spilled);
      List<Boolean> out = new ArrayList<>();
      for (String id : ids) {
        out.add(d.firstTime(id, deviceTime, nowMs));
      }
      Dedup.Recent next = d.commit(nowMs);
      if (next != null) {
        recent = next;
        spilled = d.spilledHours();
      }
      forgotten += d.forgotten();
      return out;
    }

    int largestHour() {
      return older.hours.values().stream().mapToInt(a -> a.length).max().orElse(0);
    }
  }

  private static String[] ids(int from, int to) {
    List<String> out = new ArrayList<>();
    for (int i = from; i <= to; i++) {
      out.add("m-" + i);
    }
    return out.toArray(new String[0]);
  }

  @Test
  void pastItsBoundTheRecentTierSpillsItsOldestEarlyAndForgetsNothing() {
    Device d = new Device(12, 1_000);
    d.batch(T0, T0, ids(1, 10));
    assertEquals(10, d.recent.size());
    d.batch(T0 + 60_000, T0, ids(11, 15)); // 15 > 12: down to 10, the oldest five filed
    assertEquals(10, d.recent.size());
    assertEquals(5, d.older.hours.get(Math.floorDiv(T0, HOUR)).length);
    // A fast device, within the window all along: the tier never passes its bound.
    for (int b = 0; b < 100; b++) {
      d.batch(T0 + 120_000 + b * 1_000, T0 + b * 1_000, ids(16 + b * 7, 22 + b * 7));
      assertTrue(d.recent.size() <= 12, "recent: " + d.recent.size());
    }
    assertEquals(0, d.forgotten, "every id spilled early has an hour to be found by");
    // Resends of the first, filed early, and of the last, still recent, are all duplicates.
    List<Boolean> again = d.batch(T0 + 300_000, T0, ids(1, 15));
    assertTrue(again.stream().noneMatch(b -> b), again.toString());
    assertEquals(List.of(false), d.batch(T0 + 300_001, T0 + 99_000, "m-715"));
  }

  @Test
  void idsWithoutAnHourSpilledEarlyAreForgottenAndCounted() {
    Device d = new Device(12, 1_000);
    d.batch(T0, 0L, ids(1, 10)); // a clock far off: no hour to be filed under
    d.batch(T0 + 1_000, 0L, ids(11, 15));
    assertEquals(10, d.recent.size());
    assertEquals(5, d.forgotten);
    assertTrue(d.older.hours.isEmpty());
    assertEquals(List.of(true, false), d.batch(T0 + 2_000, 0L, "m-1", "m-15"));
  }

  @Test
  void pastItsBoundAnOlderHourForgetsItsOldestIds() {
    // A frozen clock: every id falls in the same device-time hour.
    Device d = new Device(10, 20);
    for (int i = 1; i <= 60; i++) {
      d.batch(T0 + i * 1_000L, T0, "m-" + i);
      assertTrue(d.recent.size() <= 10, "recent: " + d.recent.size());
      assertTrue(d.largestHour() <= 20, "hour: " + d.largestHour());
    }
    int held = d.recent.size() + d.largestHour();
    assertEquals(60 - held, d.forgotten);
    assertTrue(d.forgotten > 0);
    // The oldest are forgotten (a resend is enriched again); the newest filed are found.
    assertEquals(List.of(true), d.batch(T0 + 61_000, T0, "m-1"));
    int newestFiled = 60 - d.recent.size();
    assertEquals(List.of(false), d.batch(T0 + 62_000, T0, "m-" + newestFiled));
  }

  @Test
  void aCheckpointOverTheBoundsIsTrimmedOnItsNextBatch() {
    // Written without bounds (the release before them): 500 recent ids, an hour of 300.
    Device d = new Device(Integer.MAX_VALUE, Integer.MAX_VALUE);
    d.batch(T0, T0 - 2 * HOUR, ids(1, 300));
    d.batch(T0 + 2 * HOUR, T0 + 2 * HOUR, ids(301, 800));
    assertEquals(500, d.recent.size());
    long filedHour = Math.floorDiv(T0 - 2 * HOUR, HOUR);
    assertEquals(300, d.older.hours.get(filedHour).length);

    Device bounded = new Device(50, 40);
    bounded.recent = d.recent;
    bounded.spilled = d.spilled;
    bounded.older.hours.putAll(d.older.hours);
    // The next batch, even one asking about no id (a timer), trims the recent tier: 458 ids
    // move early into their hour, which keeps 40 of them.
    bounded.batch(T0 + 2 * HOUR + 1_000, T0);
    assertEquals(42, bounded.recent.size(), "down to a sixth below the bound");
    assertEquals(418, bounded.forgotten);
    // The older hour over the bound is trimmed when it is next read (or filed into): its
    // newest 40 stay.
    assertEquals(List.of(false, true),
        bounded.batch(T0 + 2 * HOUR + 2_000, T0 - 2 * HOUR, "m-300", "m-260"));
    assertEquals(40, bounded.older.hours.get(filedHour).length);
    assertTrue(bounded.largestHour() <= 40, "hour: " + bounded.largestHour());
    assertEquals(418 + 260, bounded.forgotten);
  }

  @Test
  void aDeviceAtTheBoundsLosesNoMessageOnlyTheDedupOfItsOldestIds() {
    Policy p = policy("dedup_max_recent_ids=10\ndedup_max_ids_per_hour=20");
    MemoryDeviceStore store = new MemoryDeviceStore();
    batch(p, store, NOW, master());
    for (int i = 1; i <= 60; i++) {
      batch(p, store, NOW + i * 1_000L, telemetry("m-" + i, i));
      assertTrue(DeviceValue.decode(store.device).recent.size() <= 10);
      assertTrue(store.older.values().stream().allMatch(a -> a.length <= 20));
    }
    List<Row> resent = batch(p, store, NOW + 61_000, telemetry("m-1", 1), telemetry("m-60", 60));
    Map<String, Outcome> outcome = new HashMap<>();
    for (Completion c : completions(resent)) {
      outcome.put(c.getMessageId(), c.getOutcome());
    }
    assertEquals(Outcome.OUTCOME_ENRICHED, outcome.get("m-1"), "forgotten: enriched again");
    assertEquals(Outcome.OUTCOME_DUPLICATE, outcome.get("m-60"));
    assertEquals(1, events(resent).size());
  }
}
