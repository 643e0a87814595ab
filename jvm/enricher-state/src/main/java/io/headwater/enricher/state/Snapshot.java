package io.headwater.enricher.state;

import headwater.events.v1.DeviceStateOuterClass.DeviceState;
import java.util.Map;
import java.util.TreeMap;

/**
 * The entity state of a device (state.devices.v1). {@code latest} keeps at most {@code
 * maxLatest} quantities: device-chosen names would otherwise grow the state and the snapshot
 * record until the producer refuses it; quantities past the cap are counted in {@code dropped}.
 */
final class Snapshot {
  /** Measurement names longer than this (code points) are never kept. */
  static final int MAX_NAME_CHARS = 128;

  record Latest(double value, String unit) {}

  long lastSeenMs;
  long lastSeq;
  long gaps;
  long count;
  String lastId = "";
  /** Sorted by code point, as Python's sorted() on str (the record lists them in that order). */
  final Map<String, Latest> latest = new TreeMap<>(Snapshot::byCodePoint);
  long dropped;
  boolean changed;

  void record(Message m, int maxLatest) {
    changed = true;
    count += 1;
    long seq = Message.orZero(m.sequence);
    if (seq != 0 && lastSeq != 0 && seq > lastSeq + 1) {
      gaps += seq - lastSeq - 1;
    }
    lastSeq = Math.max(lastSeq, seq);
    long t = Message.orZero(m.deviceTimeMs);
    if (t >= lastSeenMs) {
      lastSeenMs = t;
      lastId = m.messageId;
      for (Message.Measurement x : m.measurements) {
        String name = x.name();
        if (latest.containsKey(name)
            || (latest.size() < maxLatest
                && name.codePointCount(0, name.length()) <= MAX_NAME_CHARS)) {
          latest.put(name, new Latest(x.value(), x.unit()));
        } else {
          dropped += 1;
        }
      }
    }
  }

  DeviceState proto(String tenant, String deviceId, long nowMs) {
    DeviceState.Builder s =
        DeviceState.newBuilder()
            .setDeviceId(deviceId)
            .setTenant(tenant)
            .setLastSequence(lastSeq)
            .setGapsDetected(gaps)
            .setMessageCount(count)
            .setLastMessageId(lastId)
            .setLatestValuesDropped(dropped)
            .setLastSeenTime(Records.timestamp(lastSeenMs))
            .setUpdatedTime(Records.timestamp(nowMs));
    for (Map.Entry<String, Latest> e : latest.entrySet()) {
      s.addLatestValuesBuilder()
          .setName(e.getKey())
          .setValue(e.getValue().value())
          .setUnit(e.getValue().unit());
    }
    return s.build();
  }

  void write(Codec.Out o) {
    o.i64(lastSeenMs).i64(lastSeq).i64(gaps).i64(count).str(lastId).i64(dropped);
    o.i32(latest.size());
    for (Map.Entry<String, Latest> e : latest.entrySet()) {
      o.str(e.getKey()).f64(e.getValue().value()).str(e.getValue().unit());
    }
  }

  static Snapshot read(Codec.In i) {
    Snapshot s = new Snapshot();
    s.lastSeenMs = i.i64();
    s.lastSeq = i.i64();
    s.gaps = i.i64();
    s.count = i.i64();
    s.lastId = i.str();
    s.dropped = i.i64();
    for (int n = i.i32(); n > 0; n--) {
      s.latest.put(i.str(), new Latest(i.f64(), i.str()));
    }
    return s;
  }

  static int byCodePoint(String a, String b) {
    int i = 0;
    int j = 0;
    while (i < a.length() && j < b.length()) {
      int ca = a.codePointAt(i);
      int cb = b.codePointAt(j);
      if (ca != cb) {
        return Integer.compare(ca, cb);
      }
      i += Character.charCount(ca);
      j += Character.charCount(cb);
    }
    return Boolean.compare(i < a.length(), j < b.length());
  }
}
