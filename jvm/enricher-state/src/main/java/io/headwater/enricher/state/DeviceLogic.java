package io.headwater.enricher.state;

import headwater.events.v1.CompletionOuterClass.Outcome;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.Iterator;
import java.util.List;
import java.util.function.Function;
import org.apache.spark.sql.Row;

/**
 * What happens to one device's records in one micro-batch or timer: master data first, then messages in the device's
 * order; dedup, dead letters, parking until master data, enrichment, the snapshot.
 */
final class DeviceLogic {
  static final String MISSING_MASTER = "MASTER_DATA_MISSING";
  static final String PARKED_LIMIT = "PARKED_LIMIT";
  static final String PARKED_BYTES_LIMIT = "PARKED_BYTES_LIMIT";
  /** Why a message failed inside the keyed state (a bug or an unforeseen value). */
  static final String STATE_FAILED = "STATE_FAILED";

  /** The device's order, total so a replay decides the same (state._order). */
  static final Comparator<Message> ORDER =
      Comparator.<Message>comparingInt(m -> m.isMaster() ? 0 : 1)
          .thenComparingLong(m -> Message.orZero(m.sequence))
          .thenComparingLong(m -> Message.orZero(m.deviceTimeMs))
          .thenComparing(m -> m.srcTopic, Snapshot::byCodePoint)
          .thenComparingInt(m -> m.srcPartition)
          .thenComparingLong(m -> m.srcOffset);

  private final Policy policy;
  private final Records records;
  private final DeviceStore store;
  private final String tenant;
  private final String deviceKey;
  private final long now;
  private final DeviceValue dev;
  private final Dedup dedup;
  private final List<Row> out = new ArrayList<>();
  private Definitions defs;
  private boolean defsChanged;

  DeviceLogic(Policy policy, Records records, DeviceStore store, String tenant, String deviceKey,
      long nowMs) {
    this.policy = policy;
    this.records = records;
    this.store = store;
    this.tenant = tenant;
    this.deviceKey = deviceKey;
    this.now = nowMs;
    this.dev = DeviceValue.decode(store.device());
    this.dedup = new Dedup(store, policy);
    dedup.begin(dev.recent, dev.spilledHours);
  }

  /**
   * Processes a batch of the device. Rows are taken in chunks of at most {@code
   * maxRowsPerChunk} rows and {@code maxChunkBytes} original bytes, each sorted into the
   * device's order: a backlog of one device is never held whole (sorting a key's whole batch
   * at once, a backlog of large messages could exceed a worker's memory).
   */
  <T> List<Row> batch(Iterator<T> rows, Function<T, Message> read) {
    moveParkedList();
    boolean hadMaster = dev.master != null;
    List<Message> chunk = new ArrayList<>();
    long bytes = 0;
    while (rows.hasNext()) {
      Message m = read.apply(rows.next());
      chunk.add(m);
      bytes += m.value == null ? 0 : m.value.length;
      if (chunk.size() >= policy.maxRowsPerChunk || bytes >= policy.maxChunkBytes) {
        run(chunk);
        chunk = new ArrayList<>();
        bytes = 0;
      }
    }
    run(chunk);
    if (!hadMaster && dev.master != null && dev.parked > 0) {
      retry(false); // late master data: the parked messages go now
    }
    return finish();
  }

  /** Retries the parked messages that are due (a timer fired). */
  List<Row> timer() {
    moveParkedList();
    if (dev.parked > 0) {
      retry(true);
    }
    return finish();
  }

  private void run(List<Message> chunk) {
    chunk.sort(ORDER);
    for (Message m : chunk) {
      try {
        message(m);
      } catch (RuntimeException e) { // a bug or an unforeseen value: that message only
        dead(m, 1, failure("state", STATE_FAILED, e));
      }
    }
  }

  private void message(Message m) {
    if (m.isMaster()) {
      master(m);
    } else if (m.decodeFailed()) {
      dead(m, 1, null);
    } else if (!dedup.firstTime(Dedup.key(m), m.deviceTimeMs, now)) {
      out.add(records.completion(m, Outcome.OUTCOME_DUPLICATE, now, 1, ""));
    } else if (m.hasError()) {
      dead(m, 1, null);
    } else if (dev.master == null || dev.parked > 0) {
      // Behind parked messages of the same device: keep its order.
      park(m);
    } else {
      enrich(m, 1);
    }
  }

  private void master(Message m) {
    if (m.hasError()) {
      out.add(records.deadLetter(m, now, 1, null, null, null, null));
      return;
    }
    dev.changed = true;
    dev.master = m.masterDeleted ? null
        : new DeviceValue.Master(m.site, m.areaCode, m.vendorFormat, m.model);
  }

  /** Why a message is a dead letter: stage, reason, class, message (null: its own error). */
  record Why(String stage, String reason, String errorClass, String errorMessage) {}

  private void dead(Message m, int attempts, Why why) {
    Why w = why == null ? new Why(null, null, null, null) : why;
    out.add(records.deadLetter(m, now, attempts, w.stage(), w.reason(), w.errorClass(),
        w.errorMessage()));
    String reason = w.reason() != null ? w.reason() : Message.orEmpty(m.errorReason);
    out.add(records.completion(m, Outcome.OUTCOME_DEAD_LETTERED, now, attempts, reason));
  }

  /**
   * Parks a new message, or dead-letters it if the device's parked messages are at their
   * count or byte limit: the newest message is refused, what is parked never grows past them.
   */
  private void park(Message m) {
    long notBefore = policy.notBefore(now, 1);
    byte[] entry = new Parked(notBefore, 1, MISSING_MASTER, m).encode();
    Why refused = overLimit(dev.parked, dev.parkedBytes, entry.length, m.deviceKey);
    if (refused != null) {
      dead(m, 1, refused);
      return;
    }
    out.add(records.parked(m, 1, notBefore, MISSING_MASTER));
    store.park(dev.parkedNext++, entry);
    store.registerTimer(notBefore);
    dev.parked += 1;
    dev.parkedBytes += entry.length;
    dev.changed = true;
    out.add(records.completion(m, Outcome.OUTCOME_RETRY_SCHEDULED, now, 1, MISSING_MASTER));
  }

  /** Why an entry of {@code bytes} may not join {@code count} parked of {@code held} bytes. */
  private Why overLimit(int count, long held, long bytes, String device) {
    String redrive = "; redrive this one once its master data is in";
    if (count >= policy.maxParked) {
      return new Why("enrich", PARKED_LIMIT, "ParkedLimitError",
          "device " + Text.repr(device) + " already has " + count
              + " messages parked waiting for master data (the limit)" + redrive);
    }
    if (held + bytes > policy.maxParkedBytes) {
      return new Why("enrich", PARKED_BYTES_LIMIT, "ParkedBytesLimitError",
          "device " + Text.repr(device) + " already has " + held + " bytes parked waiting for "
              + "master data; this message's " + bytes + " would pass the limit of "
              + policy.maxParkedBytes + redrive);
    }
    return null;
  }

  private void enrich(Message m, int attempt) {
    try {
      if (!m.definitions.isEmpty() || !m.pending.isEmpty()) {
        sparkplug(m);
      }
      if (Events.estimatedBytes(m) > policy.maxEventBytes) {
        throw new NormalizeException("enrich", "EVENT_TOO_LARGE",
            "the event of this message would take about " + Events.estimatedBytes(m)
                + " bytes (" + m.measurements.size() + " measurements); the limit is "
                + policy.maxEventBytes);
      }
    } catch (NormalizeException e) {
      dead(m, attempt, new Why(e.stage, e.reason, e.errorClass(),
          Text.head(e.getMessage(), 1000)));
      return;
    }
    List<Row> events = new ArrayList<>(1);
    try {
      events.add(records.event(m, Events.build(m, dev.master)));
    } catch (RuntimeException e) { // one message's unforeseen value must not stop the query
      dead(m, attempt, failure("enrich", STATE_FAILED, e));
      return;
    }
    out.addAll(events);
    dev.snapshot.record(m, policy.maxLatestValues);
    out.add(records.completion(m, Outcome.OUTCOME_ENRICHED, now, attempt, ""));
  }

  /** Sparkplug B: take the message's definitions, resolve its readings (Definitions). */
  private void sparkplug(Message m) throws NormalizeException {
    if (defs == null) {
      defs = Definitions.decode(store.definitions());
    }
    if (!m.definitions.isEmpty()) {
      defs.apply(m, policy.maxDefinitions, policy.maxDefinitionBytes);
      defsChanged = true;
    }
    List<Message.Measurement> resolved = defs.resolve(m);
    m.measurements = new ArrayList<>(m.measurements);
    m.measurements.addAll(resolved);
  }

  /**
   * Moves the parked entries of the layout before slots (one list) into slots, in their
   * order, once per device: the entries past the count and byte limits become dead letters
   * (a list over them, written by an older operator or before a limit was lowered, is drained
   * instead of read whole on every retry). Spark reads the list whole this once.
   */
  private void moveParkedList() {
    if (!dev.parkedInList) {
      return;
    }
    dev.parkedInList = false;
    if (dev.parked == 0) {
      return; // an empty list: nothing to read
    }
    int count = 0;
    long bytes = 0;
    for (Iterator<byte[]> it = store.parkedList(); it.hasNext(); ) {
      byte[] v = it.next();
      Why over = overLimit(count, bytes, v.length, deviceKey);
      if (over != null) {
        Parked p = Parked.decode(v);
        dead(p.message(), p.attempt(), over);
      } else {
        store.park(count, v);
        count++;
        bytes += v.length;
      }
    }
    store.clearParkedList();
    dev.parked = count;
    dev.parkedBytes = bytes;
    dev.parkedHead = 0;
    dev.parkedNext = count;
    dev.changed = true;
  }

  /**
   * Retries parked messages, slot by slot in the order they were parked, holding one at a
   * time: with master data every one goes; without, the due ones are parked again in place
   * (only they are written) or, at the last attempt, dead-lettered (their slots removed). Each
   * message is guarded on its own. Entries past the count and byte limits (lowered since they
   * were parked) are dead-lettered, the newest first.
   */
  private void retry(boolean dueOnly) {
    int count = 0;
    long bytes = 0;
    long head = -1;
    for (long slot = dev.parkedHead; slot < dev.parkedNext; slot++) {
      byte[] v = store.parked(slot);
      if (v == null) {
        continue; // a message that went in an earlier retry
      }
      Parked p = Parked.decode(v);
      Why over = overLimit(count, bytes, v.length, deviceKey);
      byte[] kept = null;
      if (over != null) {
        dead(p.message(), p.attempt(), over);
      } else {
        kept = retry(p, v, dueOnly);
      }
      if (kept == null) {
        store.unpark(slot);
        continue;
      }
      if (kept != v) {
        store.park(slot, kept);
      }
      head = head < 0 ? slot : head;
      count++;
      bytes += kept.length;
    }
    dev.parked = count;
    dev.parkedBytes = bytes;
    dev.parkedHead = count == 0 ? 0 : head;
    dev.parkedNext = count == 0 ? 0 : dev.parkedNext;
    dev.changed = true;
  }

  /** Retries one parked message; returns its entry to keep ({@code v}: unchanged) or null. */
  private byte[] retry(Parked p, byte[] v, boolean dueOnly) {
    Message m = p.message();
    int attempt = p.attempt() + 1;
    try {
      if (dev.master != null) {
        enrich(m, attempt);
        return null;
      }
      if (dueOnly && p.notBeforeMs() > now) {
        return v;
      }
      if (attempt >= policy.maxAttempts) {
        dead(m, attempt, new Why("enrich", MISSING_MASTER, "MasterDataMissingError",
            "no master data for " + Text.repr(m.deviceKey) + " after " + attempt
                + " attempts"));
        return null;
      }
      long notBefore = policy.notBefore(now, attempt);
      out.add(records.parked(m, attempt, notBefore, MISSING_MASTER));
      byte[] again = new Parked(notBefore, attempt, MISSING_MASTER, m).encode();
      store.registerTimer(notBefore);
      out.add(records.completion(m, Outcome.OUTCOME_RETRY_SCHEDULED, now, attempt,
          MISSING_MASTER));
      return again;
    } catch (RuntimeException e) { // the retry path is guarded per message too
      dead(m, attempt, failure("state", STATE_FAILED, e));
      return null;
    }
  }

  /** Dedup ids the bounds forgot in this batch or timer (after {@link #batch} or {@link #timer}). */
  long dedupIdsForgotten() {
    return dedup.forgotten();
  }

  private List<Row> finish() {
    if (defsChanged) {
      store.definitions(defs.encode());
    }
    Dedup.Recent recent = dedup.commit(now);
    if (recent != null) {
      dev.recent = recent;
      dev.spilledHours = dedup.spilledHours();
      dev.changed = true;
    }
    if (dev.snapshot.changed) {
      out.add(records.deviceState(dev.snapshot.proto(tenant, deviceKey, now)));
    }
    if (dev.changed || dev.snapshot.changed) {
      store.device(dev.encode());
    }
    return out;
  }

  private static Why failure(String stage, String reason, Throwable e) {
    String message = e.getMessage() == null ? e.toString() : e.getMessage();
    return new Why(stage, reason, e.getClass().getSimpleName(), Text.head(message, 1000));
  }
}
