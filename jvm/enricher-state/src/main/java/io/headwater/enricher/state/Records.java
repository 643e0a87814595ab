package io.headwater.enricher.state;

import com.google.protobuf.ByteString;
import com.google.protobuf.Timestamp;
import headwater.events.v1.CompletionOuterClass.Completion;
import headwater.events.v1.CompletionOuterClass.Outcome;
import headwater.events.v1.CompletionOuterClass.SourceRecord;
import headwater.events.v1.DeadLetterOuterClass.DeadLetter;
import headwater.events.v1.DeadLetterOuterClass.Redrive;
import headwater.events.v1.DeviceStateOuterClass.DeviceState;
import headwater.events.v1.EventOuterClass.Event;
import headwater.events.v1.ParkedMessageOuterClass.ParkedMessage;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.types.StructType;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Output rows (schema.py's OUTPUT) of the records the sink produces: events, completions, dead
 * letters, parked messages and device snapshots, with their keys and headers.
 */
final class Records {
  static final StructType OUTPUT =
      StructType.fromDDL(
          "topic string, key binary, value binary, headers array<struct<key:string,value:binary>>,"
              + " role string, label string, ref string, event_id string, received_ms long,"
              + " batch_ms long");
  /** Headers copied from an ingest record onto everything derived from it (route.PASSTHROUGH). */
  static final List<String> PASSTHROUGH =
      List.of("message-id", "tenant", "received-at-ms", "traceparent", "tracestate");

  private final Policy policy;

  Records(Policy policy) {
    this.policy = policy;
  }

  static Timestamp timestamp(long ms) {
    return Timestamp.newBuilder()
        .setSeconds(Math.floorDiv(ms, 1000))
        .setNanos((int) Math.floorMod(ms, 1000) * 1_000_000)
        .build();
  }

  static SourceRecord source(Message m) {
    return SourceRecord.newBuilder()
        .setTopic(m.srcTopic)
        .setPartition(m.srcPartition)
        .setOffset(m.srcOffset)
        .build();
  }

  Row completion(Message m, Outcome outcome, long batchMs, int attempt, String reason) {
    Completion c =
        Completion.newBuilder()
            .setMessageId(Message.orEmpty(m.messageId))
            .setDeviceId(m.deviceKey)
            .setOutcome(outcome)
            .setSource(source(m))
            .setReason(reason)
            .setAttempt(attempt)
            .setCompletedTime(timestamp(batchMs))
            .setTenant(m.tenant)
            .build();
    String label = outcome.name().substring("OUTCOME_".length());
    return row(policy.completions, m.deviceKey, c.toByteArray(), passthrough(m), "completion",
        label, m.ref(), null, m.receivedMs, batchMs);
  }

  Row event(Message m, Event e) {
    return row(policy.eventTopic(e.getEventType()), e.getDeviceId(), e.toByteArray(),
        passthrough(m), "event", e.getEventType(), m.ref(), e.getEventId(), null, null);
  }

  /** A dead letter; null {@code stage}, {@code reason}... take the message's own error. */
  Row deadLetter(Message m, long batchMs, int attempts, String stage, String reason,
      String errorClass, String errorMessage) {
    String why = firstNonEmpty(reason, m.errorReason, "UNKNOWN");
    DeadLetter.Builder d =
        DeadLetter.newBuilder()
            .setMessageId(Message.orEmpty(m.messageId))
            .setDeviceId(m.deviceKey)
            .setSource(source(m))
            .setOriginalValue(bytes(m.value))
            .setStage(firstNonEmpty(stage, m.errorStage, ""))
            .setReason(why)
            .setErrorClass(firstNonEmpty(errorClass, m.errorClass, ""))
            .setErrorMessage(firstNonEmpty(errorMessage, m.errorMessage, ""))
            .setAttempts(attempts)
            .setDeadLetteredTime(timestamp(batchMs));
    for (Message.Header h : m.headers) {
      d.addOriginalHeadersBuilder().setKey(h.key()).setValue(bytes(h.value()));
    }
    d.addAllRedrives(redrives(m));
    return row(policy.deadletter, m.deviceKey, d.build().toByteArray(), passthrough(m),
        "deadletter", why, null, null, null, null);
  }

  /** The retry-topic record of a parked message. */
  Row parked(Message m, int attempt, long notBeforeMs, String reason) {
    ParkedMessage.Builder p =
        ParkedMessage.newBuilder()
            .setMessageId(Message.orEmpty(m.messageId))
            .setDeviceId(m.deviceKey)
            .setSource(source(m))
            .setOriginalValue(bytes(m.value))
            .setAttempt(attempt)
            .setNotBefore(timestamp(notBeforeMs))
            .setReason(reason);
    for (Message.Header h : m.headers) {
      p.addOriginalHeadersBuilder().setKey(h.key()).setValue(bytes(h.value()));
    }
    return row(policy.retry, m.deviceKey, p.build().toByteArray(), passthrough(m), "retry",
        reason, null, null, null, null);
  }

  Row deviceState(DeviceState s) {
    String key = s.getTenant().isEmpty() ? s.getDeviceId() : s.getTenant() + "/" + s.getDeviceId();
    return row(policy.state, key, s.toByteArray(), List.of(), "state", "snapshot", null, null,
        null, null);
  }

  /** The redrives recorded in a record's audit headers, oldest first (route.redrive_history). */
  static List<Redrive> redrives(Message m) {
    List<String> by = new ArrayList<>();
    List<String> why = new ArrayList<>();
    List<byte[]> at = new ArrayList<>();
    for (Message.Header h : m.headers) {
      byte[] v = h.value() == null ? new byte[0] : h.value();
      switch (h.key()) {
        case "redrive-by" -> by.add(new String(v, StandardCharsets.UTF_8));
        case "redrive-reason" -> why.add(new String(v, StandardCharsets.UTF_8));
        case "redrive-at-ms" -> at.add(v);
        default -> { }
      }
    }
    List<Redrive> out = new ArrayList<>();
    for (int i = 0; i < Math.min(by.size(), Math.min(why.size(), at.size())); i++) {
      out.add(Redrive.newBuilder().setBy(by.get(i)).setReason(why.get(i))
          .setRedrivenTime(timestamp(digits(at.get(i)))).build());
    }
    return out;
  }

  private static long digits(byte[] v) {
    if (v.length == 0) {
      return 0;
    }
    for (byte b : v) {
      if (b < '0' || b > '9') {
        return 0;
      }
    }
    try {
      return Long.parseLong(new String(v, StandardCharsets.US_ASCII));
    } catch (NumberFormatException e) {
      return 0; // more digits than a long: no time rather than a failed message
    }
  }

  private static List<Row> passthrough(Message m) {
    List<Row> out = new ArrayList<>(PASSTHROUGH.size());
    for (String key : PASSTHROUGH) {
      byte[] v = m.header(key);
      if (v != null) {
        out.add(RowFactory.create(key, v));
      }
    }
    return out;
  }

  private static Row row(String topic, String key, byte[] value, List<Row> headers, String role,
      String label, String ref, String eventId, Long receivedMs, Long batchMs) {
    return RowFactory.create(topic, key.getBytes(StandardCharsets.UTF_8), value,
        CollectionConverters.asScala(headers).toSeq(), role, label, ref, eventId, receivedMs,
        batchMs);
  }

  private static ByteString bytes(byte[] v) {
    return v == null ? ByteString.EMPTY : ByteString.copyFrom(v);
  }

  private static String firstNonEmpty(String a, String b, String c) {
    if (a != null && !a.isEmpty()) {
      return a;
    }
    return b != null && !b.isEmpty() ? b : c;
  }
}
