package io.headwater.enricher.state;

import com.google.protobuf.InvalidProtocolBufferException;
import headwater.events.v1.CompletionOuterClass.Completion;
import headwater.events.v1.DeadLetterOuterClass.DeadLetter;
import headwater.events.v1.EventOuterClass.Event;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.Row;

/** Messages and policies for the tests, and readers of the output rows. */
final class Fixtures {
  static final String TOPIC = "ingest.telemetry.v1";
  static final long NOW = 1_700_000_000_000L;

  private Fixtures() {}

  static Policy policy(String extra) {
    return Policy.parse(
        "topic.completions=completions\ntopic.deadletter=dlq\ntopic.retry=retry\n"
            + "topic.state=state\ntopic.event.telemetry=telemetry\ntopic.event.alarm=alarms\n"
            + "max_attempts=3\nbackoff_ms=5000\nbackoff_max_ms=300000\n"
            + "dedup_window_ms=3600000\ndedup_horizon_ms=608400000\n" + extra);
  }

  static Message telemetry(String id, long seq) {
    Message m = new Message();
    m.tenant = "acme";
    m.deviceKey = "dev-1";
    m.deviceId = "dev-1";
    m.messageId = id;
    m.sequence = seq;
    m.deviceTimeMs = NOW - 1000 + seq;
    m.receivedMs = NOW - 500;
    m.gatewayId = "gw";
    m.eventType = "telemetry";
    m.sourceFormat = "acme";
    m.measurements.add(new Message.Measurement("temp", 21.5, "celsius", null));
    m.srcTopic = TOPIC;
    m.srcOffset = seq;
    m.value = ("raw-" + id).getBytes(StandardCharsets.UTF_8);
    m.headers.add(new Message.Header("message-id", id.getBytes(StandardCharsets.UTF_8)));
    m.headers.add(new Message.Header("tenant", "acme".getBytes(StandardCharsets.UTF_8)));
    return m;
  }

  static Message master() {
    Message m = new Message();
    m.kind = "master";
    m.tenant = "acme";
    m.deviceKey = "dev-1";
    m.site = "plant-1";
    m.areaCode = "A1";
    m.vendorFormat = "acme";
    m.model = "x";
    m.srcTopic = "master.devices.v1";
    return m;
  }

  static List<Row> batch(Policy p, MemoryDeviceStore store, long now, Message... msgs) {
    DeviceLogic logic = new DeviceLogic(p, new Records(p), store, "acme", "dev-1", now);
    return logic.batch(List.of(msgs).iterator(), m -> m);
  }

  static List<Row> timer(Policy p, MemoryDeviceStore store, long now) {
    return new DeviceLogic(p, new Records(p), store, "acme", "dev-1", now).timer();
  }

  static List<Row> role(List<Row> rows, String role) {
    List<Row> out = new ArrayList<>();
    for (Row r : rows) {
      if (role.equals(r.getString(4))) {
        out.add(r);
      }
    }
    return out;
  }

  static List<Completion> completions(List<Row> rows) {
    List<Completion> out = new ArrayList<>();
    for (Row r : role(rows, "completion")) {
      out.add(parse(() -> Completion.parseFrom((byte[]) r.get(2))));
    }
    return out;
  }

  static List<Event> events(List<Row> rows) {
    List<Event> out = new ArrayList<>();
    for (Row r : role(rows, "event")) {
      out.add(parse(() -> Event.parseFrom((byte[]) r.get(2))));
    }
    return out;
  }

  static List<DeadLetter> deadLetters(List<Row> rows) {
    List<DeadLetter> out = new ArrayList<>();
    for (Row r : role(rows, "deadletter")) {
      out.add(parse(() -> DeadLetter.parseFrom((byte[]) r.get(2))));
    }
    return out;
  }

  interface Parse<T> {
    T get() throws InvalidProtocolBufferException;
  }

  static <T> T parse(Parse<T> p) {
    try {
      return p.get();
    } catch (InvalidProtocolBufferException e) {
      throw new AssertionError(e);
    }
  }
}
