package io.headwater.enricher.state;

import static io.headwater.enricher.state.Fixtures.NOW;
import static io.headwater.enricher.state.Fixtures.batch;
import static io.headwater.enricher.state.Fixtures.completions;
import static io.headwater.enricher.state.Fixtures.deadLetters;
import static io.headwater.enricher.state.Fixtures.events;
import static io.headwater.enricher.state.Fixtures.master;
import static io.headwater.enricher.state.Fixtures.policy;
import static io.headwater.enricher.state.Fixtures.telemetry;
import static io.headwater.enricher.state.Fixtures.timer;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import headwater.events.v1.CompletionOuterClass.Completion;
import headwater.events.v1.CompletionOuterClass.Outcome;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.junit.jupiter.api.Test;

/** The parked messages of a device are bounded in bytes, and a list over the bounds drains. */
class ParkedBoundsTest {
  /** The size of the messages that crashed the retry (issue 35: 1,500 of 240 KB). */
  private static final int LARGE = 240_000;

  private static Message large(int seq) {
    Message m = telemetry("m-" + seq, seq);
    m.value = new byte[LARGE];
    return m;
  }

  private static Message[] large(int from, int to) {
    List<Message> out = new ArrayList<>();
    for (int i = from; i <= to; i++) {
      out.add(large(i));
    }
    return out.toArray(new Message[0]);
  }

  private static long parkedBytes(MemoryDeviceStore store) {
    return store.parked.values().stream().mapToLong(e -> e.length).sum();
  }

  /** Each message id's terminal completions (enriched, dead-lettered, duplicate). */
  private static Map<String, Integer> terminal(List<Row> out) {
    Map<String, Integer> n = new HashMap<>();
    for (Completion c : completions(out)) {
      if (c.getOutcome() != Outcome.OUTCOME_RETRY_SCHEDULED) {
        n.merge(c.getMessageId(), 1, Integer::sum);
      }
    }
    return n;
  }

  @Test
  void theNewestMessagePastTheByteLimitIsADeadLetterAndTheParkedBytesNeverGrow() {
    Policy p = policy("max_parked_bytes=1000000"); // room for four 240 KB messages
    MemoryDeviceStore store = new MemoryDeviceStore();
    List<Row> out = batch(p, store, NOW, large(1, 10));
    assertEquals(4, store.parked.size());
    assertTrue(parkedBytes(store) <= 1_000_000);
    assertEquals(List.of("m-5", "m-6", "m-7", "m-8", "m-9", "m-10"),
        deadLetters(out).stream().map(d -> d.getMessageId()).toList());
    assertTrue(deadLetters(out).stream().allMatch(d -> d.getReason().equals("PARKED_BYTES_LIMIT")));
    assertTrue(deadLetters(out).get(0).getErrorMessage().contains("limit of 1000000"),
        deadLetters(out).get(0).getErrorMessage());
    assertEquals(DeviceValue.decode(store.device).parkedBytes, parkedBytes(store));
    // A later message is refused too; the retry re-parks what is kept within the bound.
    List<Row> more = batch(p, store, NOW + 1_000, large(11));
    assertEquals("PARKED_BYTES_LIMIT", deadLetters(more).get(0).getReason());
    timer(p, store, NOW + 5_000);
    assertEquals(4, store.parked.size());
    assertEquals(DeviceValue.decode(store.device).parkedBytes, parkedBytes(store));
    // Master data releases the kept ones; every input had exactly one terminal completion.
    List<Row> released = batch(p, store, NOW + 6_000, master());
    assertEquals(4, events(released).size());
    Map<String, Integer> all = terminal(out);
    terminal(more).forEach((k, v) -> all.merge(k, v, Integer::sum));
    terminal(released).forEach((k, v) -> all.merge(k, v, Integer::sum));
    assertEquals(11, all.size());
    assertTrue(all.values().stream().allMatch(v -> v == 1), all.toString());
    assertEquals(0, DeviceValue.decode(store.device).parkedBytes);
  }

  @Test
  void aParkedListOverTheLimitsFromAnOlderVersionIsDrainedNotReadWhole() {
    // An older operator kept 150 x 240 KB (36 MB) parked and a device value without the
    // parked bytes; the first retry keeps what fits and dead-letters the rest, once.
    MemoryDeviceStore store = new MemoryDeviceStore();
    Policy unbounded = policy("max_parked_bytes=" + Long.MAX_VALUE);
    batch(unbounded, store, NOW, large(1, 150));
    assertEquals(150, store.parked.size());
    inTheParkedList(store, BEFORE_PARKED_BYTES);
    assertEquals(0, DeviceValue.decode(store.device).parkedBytes, "older value: no bytes yet");

    Policy p = policy("max_parked_bytes=4000000");
    List<Row> drained = timer(p, store, NOW + 5_000);
    assertEquals(16, store.parked.size(), "16 x 240 KB fit in 4 MB");
    assertTrue(parkedBytes(store) <= 4_000_000);
    assertEquals(DeviceValue.decode(store.device).parkedBytes, parkedBytes(store));
    assertEquals(134, deadLetters(drained).size());
    assertTrue(deadLetters(drained).stream()
        .allMatch(d -> d.getReason().equals("PARKED_BYTES_LIMIT")));
    assertEquals("m-17", deadLetters(drained).get(0).getMessageId(), "the newest go");
    assertEquals(1, store.parkedListReads);
    assertTrue(store.parkedList.isEmpty(), "moved into slots");
    // The next retry has nothing over the limits left to drain.
    List<Row> next = timer(p, store, NOW + 20_000);
    assertEquals(1, store.parkedListReads, "the list is read once");
    assertTrue(deadLetters(next).stream().allMatch(d -> d.getReason().equals("MASTER_DATA_MISSING")));
    assertEquals(16, deadLetters(next).size(), "the kept ones reached their last attempt");
    assertTrue(store.parked.isEmpty());
  }

  @Test
  void aDeviceValueOfTheOlderLayoutReadsAsTheNewOne() {
    MemoryDeviceStore store = new MemoryDeviceStore();
    batch(policy(""), store, NOW, master(), telemetry("m-1", 1));
    DeviceValue now = DeviceValue.decode(store.device);
    DeviceValue old = DeviceValue.decode(
        Arrays.copyOf(store.device, store.device.length - BEFORE_PARKED_BYTES));
    assertEquals(now.master, old.master);
    assertEquals(now.snapshot.count, old.snapshot.count);
    assertEquals(now.recent.size(), old.recent.size());
    assertEquals(0, old.parkedBytes);
    assertTrue(Arrays.equals(store.device, old.encode()), "rewritten in the new layout");
  }

  @Test
  void theWorstCaseOfOneDeviceStaysWithinItsByteBoundAtTheSizeThatBrokeIt() {
    // 1,500 x 240 KB (360 MB) without master data, at the default bound: the parked list and
    // every retry hold at most 32 MiB, however many such messages come.
    Policy p = policy("");
    MemoryDeviceStore store = new MemoryDeviceStore();
    int dead = 0;
    for (int from = 1; from <= 1_500; from += 100) { // in micro-batches, as they arrive
      List<Row> out = batch(p, store, NOW + from, large(from, from + 99));
      dead += deadLetters(out).size();
    }
    int parked = store.parked.size();
    assertEquals(1_500, parked + dead);
    long entry = store.parked.firstEntry().getValue().length;
    assertEquals(Policy.DEFAULT_MAX_PARKED_BYTES / entry, parked, "as many as fit");
    assertTrue(parkedBytes(store) <= Policy.DEFAULT_MAX_PARKED_BYTES);
    timer(p, store, NOW + 5_000);
    assertTrue(parkedBytes(store) <= Policy.DEFAULT_MAX_PARKED_BYTES);
  }

  @Test
  void theParkedListOfTheLayoutBeforeSlotsMovesIntoSlotsOnceInItsOrder() {
    // A device value with the parked bytes but no slots, its entries in the one list.
    MemoryDeviceStore store = new MemoryDeviceStore();
    Policy p = policy("");
    batch(p, store, NOW, telemetry("m-1", 1), telemetry("m-2", 2), telemetry("m-3", 3));
    inTheParkedList(store, BEFORE_SLOTS);
    assertTrue(DeviceValue.decode(store.device).parkedInList);
    // A new message is parked behind them: the list moves first, in its order.
    List<Row> more = batch(p, store, NOW + 1_000, telemetry("m-4", 4));
    assertEquals(1, store.parkedListReads);
    assertTrue(store.parkedList.isEmpty());
    assertEquals(4, store.parked.size());
    assertEquals(1, completions(more).size(), "moving puts out nothing of its own");
    DeviceValue moved = DeviceValue.decode(store.device);
    assertEquals(4, moved.parked);
    assertEquals(parkedBytes(store), moved.parkedBytes);
    assertTrue(!moved.parkedInList);
    List<Row> released = batch(p, store, NOW + 2_000, master());
    assertEquals(List.of("m-1", "m-2", "m-3", "m-4"),
        events(released).stream().map(e -> e.getMessageId()).toList());
    assertTrue(store.parked.isEmpty());
    assertEquals(1, store.parkedListReads, "read once");
  }

  /** The trailing bytes of the device value each earlier layout lacks. */
  private static final int BEFORE_SLOTS = 16;
  private static final int BEFORE_PARKED_BYTES = 8 + BEFORE_SLOTS;

  /**
   * The store as an earlier operator kept it: the parked entries in one list, in slot order,
   * and the device value without its last {@code missing} bytes.
   */
  private static void inTheParkedList(MemoryDeviceStore store, int missing) {
    store.parkedList = new ArrayList<>(store.parked.values());
    store.parked.clear();
    store.device = Arrays.copyOf(store.device, store.device.length - missing);
  }
}
