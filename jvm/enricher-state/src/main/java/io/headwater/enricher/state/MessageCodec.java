package io.headwater.enricher.state;

import java.util.Map;

/**
 * A parked message in state: the whole decoded, normalized message, so a retry needs no Python
 * (no second decode of the original bytes).
 */
final class MessageCodec {
  private MessageCodec() {}

  static void write(Codec.Out o, Message m) {
    o.str(m.kind).str(m.tenant).str(m.deviceKey).str(m.messageId).str(m.deviceId);
    o.optLong(m.deviceTimeMs).optLong(m.sequence).str(m.gatewayId).optLong(m.receivedMs);
    o.str(m.errorStage).str(m.errorReason).str(m.errorClass).str(m.errorMessage);
    o.str(m.eventType).str(m.sourceFormat);
    o.i32(m.measurements.size());
    for (Message.Measurement x : m.measurements) {
      o.str(x.name()).f64(x.value()).str(x.unit()).optLong(x.timeMs());
    }
    o.str(m.alarmCode).optLong(m.alarmSeverity == null ? null : m.alarmSeverity.longValue());
    o.str(m.alarmText);
    o.i32(m.definitions.size());
    for (Message.Definition d : m.definitions) {
      o.optLong(d.alias()).str(d.name()).str(d.unit()).i32(d.datatype());
    }
    o.bool(m.replacesDefinitions);
    o.i32(m.pending.size());
    for (Message.Reading r : m.pending) {
      o.optLong(r.alias()).str(r.name()).f64(r.value()).str(r.unit()).optLong(r.timeMs());
      o.i32(r.datatype());
    }
    o.i32(m.units.size());
    for (Map.Entry<String, Conversion> e : m.units.entrySet()) {
      Conversion c = e.getValue();
      o.str(e.getKey()).str(c.canonical()).f64(c.scale()).f64(c.offset()).str(c.error());
    }
    o.str(m.srcTopic).i32(m.srcPartition).i64(m.srcOffset).bytes(m.value);
    o.i32(m.headers.size());
    for (Message.Header h : m.headers) {
      o.str(h.key()).bytes(h.value());
    }
  }

  static Message read(Codec.In i) {
    Message m = new Message();
    m.kind = i.str();
    m.tenant = i.str();
    m.deviceKey = i.str();
    m.messageId = i.str();
    m.deviceId = i.str();
    m.deviceTimeMs = i.optLong();
    m.sequence = i.optLong();
    m.gatewayId = i.str();
    m.receivedMs = i.optLong();
    m.errorStage = i.str();
    m.errorReason = i.str();
    m.errorClass = i.str();
    m.errorMessage = i.str();
    m.eventType = i.str();
    m.sourceFormat = i.str();
    for (int n = i.i32(); n > 0; n--) {
      m.measurements.add(new Message.Measurement(i.str(), i.f64(), i.str(), i.optLong()));
    }
    m.alarmCode = i.str();
    Long severity = i.optLong();
    m.alarmSeverity = severity == null ? null : severity.intValue();
    m.alarmText = i.str();
    for (int n = i.i32(); n > 0; n--) {
      m.definitions.add(new Message.Definition(i.optLong(), i.str(), i.str(), i.i32()));
    }
    m.replacesDefinitions = i.bool();
    for (int n = i.i32(); n > 0; n--) {
      m.pending.add(
          new Message.Reading(i.optLong(), i.str(), i.f64(), i.str(), i.optLong(), i.i32()));
    }
    for (int n = i.i32(); n > 0; n--) {
      String spelling = i.str();
      m.units.put(spelling, new Conversion(i.str(), i.f64(), i.f64(), i.str()));
    }
    m.srcTopic = i.str();
    m.srcPartition = i.i32();
    m.srcOffset = i.i64();
    m.value = i.bytes();
    for (int n = i.i32(); n > 0; n--) {
      m.headers.add(new Message.Header(i.str(), i.bytes()));
    }
    return m;
  }
}
