package io.headwater.enricher.state;

import static io.headwater.enricher.state.Fixtures.NOW;
import static io.headwater.enricher.state.Fixtures.batch;
import static io.headwater.enricher.state.Fixtures.completions;
import static io.headwater.enricher.state.Fixtures.deadLetters;
import static io.headwater.enricher.state.Fixtures.events;
import static io.headwater.enricher.state.Fixtures.master;
import static io.headwater.enricher.state.Fixtures.policy;
import static io.headwater.enricher.state.Fixtures.role;
import static io.headwater.enricher.state.Fixtures.telemetry;
import static io.headwater.enricher.state.Fixtures.timer;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import headwater.events.v1.CompletionOuterClass.Completion;
import headwater.events.v1.CompletionOuterClass.Outcome;
import headwater.events.v1.DeviceStateOuterClass.DeviceState;
import headwater.events.v1.EventOuterClass.Event;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.Row;
import org.junit.jupiter.api.Test;

class DeviceLogicTest {
  private final Policy policy = policy("");

  @Test
  void enrichesInSequenceOrderWithMasterData() {
    MemoryDeviceStore store = new MemoryDeviceStore();
    List<Row> out = batch(policy, store, NOW, telemetry("m-2", 2), master(), telemetry("m-1", 1));
    List<Event> evs = events(out);
    assertEquals(List.of("m-1", "m-2"), evs.stream().map(Event::getMessageId).toList());
    assertEquals("plant-1", evs.get(0).getSite());
    assertEquals(EventIds.of("acme", "dev-1", "m-1", 0), evs.get(0).getEventId());
    assertEquals(List.of(Outcome.OUTCOME_ENRICHED, Outcome.OUTCOME_ENRICHED),
        completions(out).stream().map(Completion::getOutcome).toList());
    // The events come before the completion of the same message; one snapshot per batch.
    assertEquals("event", out.get(0).getString(4));
    List<Row> states = role(out, "state");
    assertEquals(1, states.size());
    DeviceState s = Fixtures.parse(() -> DeviceState.parseFrom((byte[]) states.get(0).get(2)));
    assertEquals(2, s.getMessageCount());
    assertEquals("acme/dev-1", new String((byte[]) states.get(0).get(1)));
  }

  @Test
  void repeatsAreDuplicatesWithinTheWindowAndAfterItsSpill() {
    MemoryDeviceStore store = new MemoryDeviceStore();
    batch(policy, store, NOW, master(), telemetry("m-1", 1));
    List<Row> again = batch(policy, store, NOW + 1000, telemetry("m-1", 1));
    assertEquals(Outcome.OUTCOME_DUPLICATE, completions(again).get(0).getOutcome());
    // Two hours later the id was moved to the older tier; a resend is still a duplicate.
    batch(policy, store, NOW + 2 * 3_600_000L, telemetry("m-9", 9));
    assertTrue(!store.older.isEmpty(), "ids past the window moved to the older tier");
    List<Row> late = batch(policy, store, NOW + 3 * 3_600_000L, telemetry("m-1", 1));
    assertEquals(Outcome.OUTCOME_DUPLICATE, completions(late).get(0).getOutcome());
    // Past the 7-day horizon it is forgotten: a new message.
    batch(policy, store, NOW + 9 * 86_400_000L, telemetry("m-10", 10));
    List<Row> forgotten = batch(policy, store, NOW + 9 * 86_400_000L + 1, telemetry("m-1", 1));
    assertEquals(Outcome.OUTCOME_ENRICHED, completions(forgotten).get(0).getOutcome());
  }

  @Test
  void aRedriveIsNotADuplicateOfTheOriginal() {
    MemoryDeviceStore store = new MemoryDeviceStore();
    batch(policy, store, NOW, master(), telemetry("m-1", 1));
    Message redriven = telemetry("m-1", 1);
    redriven.headers.add(new Message.Header("redrive-count", "1".getBytes()));
    List<Row> out = batch(policy, store, NOW + 1, redriven);
    assertEquals(Outcome.OUTCOME_ENRICHED, completions(out).get(0).getOutcome());
    // A repeat of the same redrive is a duplicate; the next redrive runs again.
    List<Row> repeat = batch(policy, store, NOW + 2, redrive("m-1", 1, "1"));
    assertEquals(Outcome.OUTCOME_DUPLICATE, completions(repeat).get(0).getOutcome());
    List<Row> second = batch(policy, store, NOW + 3, redrive("m-1", 1, "2"));
    assertEquals(Outcome.OUTCOME_ENRICHED, completions(second).get(0).getOutcome());
  }

  private static Message redrive(String id, long seq, String count) {
    Message m = telemetry(id, seq);
    m.headers.add(new Message.Header("redrive-count", count.getBytes()));
    return m;
  }

  @Test
  void lateMasterReleasesParkedMessagesInDeviceOrder() {
    // Review defect: releasing parked messages by not-before time put a message retried more
    // often (an earlier one) after newer ones.
    MemoryDeviceStore store = new MemoryDeviceStore();
    batch(policy, store, NOW, telemetry("m-1", 1));
    timer(policy, store, NOW + 5_000); // m-1 parked again (attempt 2), not before NOW+15 s
    batch(policy, store, NOW + 6_000, telemetry("m-2", 2)); // not before NOW+11 s: earlier
    List<Row> out = batch(policy, store, NOW + 7_000, master());
    assertEquals(List.of("m-1", "m-2"), events(out).stream().map(Event::getMessageId).toList());
    assertEquals(List.of(3, 2), completions(out).stream().map(Completion::getAttempt).toList());
    assertTrue(store.parked.isEmpty());
  }

  @Test
  void aFailureWhileReleasingParkedMessagesFailsThatMessageOnly() {
    // Review defect: the late-master retry ran outside the per-message guard, so one
    // message's exception failed the batch (and its replay).
    MemoryDeviceStore store = new MemoryDeviceStore();
    Message bad = telemetry("m-1", 1);
    bad.measurements.set(0, new Message.Measurement(null, 1.0, "celsius", null));
    batch(policy, store, NOW, bad, telemetry("m-2", 2));
    List<Row> out = batch(policy, store, NOW + 1, master());
    assertEquals(List.of("m-2"), events(out).stream().map(Event::getMessageId).toList());
    assertEquals("STATE_FAILED", deadLetters(out).get(0).getReason());
    assertEquals("m-1", deadLetters(out).get(0).getMessageId());
  }

  @Test
  void aRetryReadsEachSlotOnceAndWritesOnlyTheMessagesParkedAgain() {
    // Review defect: every retry re-appended every parked message, one state call each. A
    // retry reads the slots one at a time and rewrites in place only what it parks again.
    MemoryDeviceStore store = new MemoryDeviceStore();
    List<Message> many = new ArrayList<>();
    for (int i = 1; i <= 50; i++) {
      many.add(telemetry("m-" + i, i));
    }
    batch(policy, store, NOW, many.toArray(new Message[0]));
    assertEquals(50, store.parkedWrites, "one write per message parked");
    assertEquals(0, store.parkedReads);
    timer(policy, store, NOW + 5_000); // all due: each parked again, in its own slot
    assertEquals(50, store.parkedReads);
    assertEquals(100, store.parkedWrites);
    assertEquals(List.of(0L, 49L), List.of(store.parked.firstKey(), store.parked.lastKey()));
    timer(policy, store, NOW + 6_000); // none due: read, nothing written
    assertEquals(100, store.parkedReads);
    assertEquals(100, store.parkedWrites, "nothing changed, nothing written");
    assertEquals(0, store.parkedRemoves);
    assertEquals(50, store.parked.size());
    assertEquals(0, store.parkedListReads, "the list of the layout before slots is never read");
  }

  @Test
  void aDeviceParksAtMostMaxParkedMessagesAndDeadLettersTheRest() {
    Policy small = policy("max_parked=3");
    MemoryDeviceStore store = new MemoryDeviceStore();
    List<Message> five = new ArrayList<>();
    for (int i = 1; i <= 5; i++) {
      five.add(telemetry("m-" + i, i));
    }
    List<Row> out = batch(small, store, NOW, five.toArray(new Message[0]));
    assertEquals(3, store.parked.size(), "the first three wait for master data");
    assertEquals(List.of("PARKED_LIMIT", "PARKED_LIMIT"),
        deadLetters(out).stream().map(d -> d.getReason()).toList());
    assertEquals(List.of("m-4", "m-5"),
        deadLetters(out).stream().map(d -> d.getMessageId()).toList());
    assertTrue(deadLetters(out).get(0).getErrorMessage().contains("redrive"));
    // Nothing is lost: every message has a completion; the parked ones go with master data.
    assertEquals(5, completions(out).size());
    List<Row> later = batch(small, store, NOW + 1_000, master());
    assertEquals(List.of("m-1", "m-2", "m-3"),
        events(later).stream().map(Event::getMessageId).toList());
    assertTrue(store.parked.isEmpty());
  }

  @Test
  void parkedMessagesAreDeadLetteredAtTheLastAttempt() {
    MemoryDeviceStore store = new MemoryDeviceStore();
    batch(policy, store, NOW, telemetry("m-1", 1));
    timer(policy, store, NOW + 5_000);
    List<Row> out = timer(policy, store, NOW + 20_000);
    assertEquals("MASTER_DATA_MISSING", deadLetters(out).get(0).getReason());
    assertEquals(3, deadLetters(out).get(0).getAttempts());
    assertEquals("no master data for 'dev-1' after 3 attempts",
        deadLetters(out).get(0).getErrorMessage());
    assertTrue(store.parked.isEmpty());
  }

  @Test
  void aBacklogIsSortedInBoundedChunks() {
    // Review defect: one device's backlog in one micro-batch was held (and sorted) whole.
    Policy small = policy("max_rows_per_chunk=2\n");
    MemoryDeviceStore store = new MemoryDeviceStore();
    batch(small, store, NOW, master());
    int[] held = {0};
    int[] most = {0};
    List<Message> input = List.of(telemetry("m-2", 2), telemetry("m-1", 1), telemetry("m-3", 3));
    DeviceLogic logic = new DeviceLogic(small, new Records(small), store, "acme", "dev-1", NOW);
    List<Row> out = logic.batch(input.iterator(), m -> {
      held[0] = held[0] % 2 + 1;
      most[0] = Math.max(most[0], held[0]);
      return m;
    });
    assertEquals(List.of("m-1", "m-2", "m-3"),
        events(out).stream().map(Event::getMessageId).toList());
    assertEquals(2, most[0]);
  }

  @Test
  void decodeErrorsAndNormalizeErrorsAreDeadLetters() {
    MemoryDeviceStore store = new MemoryDeviceStore();
    Message bad = telemetry("m-1", 1);
    bad.errorStage = "normalize";
    bad.errorReason = "UNKNOWN_FORMAT";
    bad.errorClass = "UnknownFormatError";
    bad.errorMessage = "no normalizer";
    List<Row> out = batch(policy, store, NOW, master(), bad);
    assertEquals("UNKNOWN_FORMAT", deadLetters(out).get(0).getReason());
    assertEquals("normalize", deadLetters(out).get(0).getStage());
    assertEquals("UNKNOWN_FORMAT", completions(out).get(0).getReason());
  }

  @Test
  void stateSurvivesAnEncodeDecodeRoundTrip() {
    MemoryDeviceStore store = new MemoryDeviceStore();
    batch(policy, store, NOW, master(), telemetry("m-1", 1));
    DeviceValue d = DeviceValue.decode(store.device);
    assertEquals("plant-1", d.master.site());
    assertEquals(1, d.snapshot.count);
    assertEquals(1, d.recent.size());
    Parked p = Parked.decode(new Parked(5, 2, "R", telemetry("m-3", 3)).encode());
    assertEquals("m-3", p.message().messageId);
    assertEquals(21.5, p.message().measurements.get(0).value());
  }
}
