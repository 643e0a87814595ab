package io.headwater.enricher.state;

import headwater.events.v1.EventOuterClass.Event;
import headwater.events.v1.EventOuterClass.Measurement;

/** A normalized message + its device's master data -> its event (enrich.build_events). */
final class Events {
  private Events() {}

  /**
   * Returns a bound on the serialized size of the event of {@code m}, computed before the event
   * is built: Sparkplug alias-only readings each take their birth name, so a small message can
   * name megabytes (a 12 KB DDATA once became a 40 MB event).
   */
  static long estimatedBytes(Message m) {
    long n = 512 + utf8(m.messageId) + 2L * utf8(m.deviceId) + utf8(m.tenant) + utf8(m.gatewayId)
        + utf8(m.alarmText) + utf8(m.alarmCode);
    for (Message.Measurement x : m.measurements) {
      n += 40 + utf8(x.name()) + utf8(x.unit());
    }
    return n;
  }

  static Event build(Message m, DeviceValue.Master master) {
    Event.Builder ev =
        Event.newBuilder()
            .setEventId(EventIds.of(m.tenant, m.deviceId, m.messageId, 0))
            .setMessageId(m.messageId)
            .setDeviceId(m.deviceId)
            .setEventType(m.eventType)
            .setTenant(m.tenant)
            .setGatewayId(Message.orEmpty(m.gatewayId))
            .setSequence(Message.orZero(m.sequence))
            .setSourceFormat(m.sourceFormat)
            .setSite(Message.orEmpty(master.site()))
            .setAreaCode(Message.orEmpty(master.areaCode()))
            .setDeviceTime(Records.timestamp(Message.orZero(m.deviceTimeMs)))
            .setReceivedTime(Records.timestamp(Message.orZero(m.receivedMs)));
    for (Message.Measurement x : m.measurements) {
      Measurement.Builder b =
          ev.addMeasurementsBuilder().setName(x.name()).setValue(x.value()).setUnit(x.unit());
      if (x.timeMs() != null) { // formats that time each reading (Sparkplug B, OPC UA)
        b.setTime(Records.timestamp(x.timeMs()));
      }
    }
    if (m.alarmCode != null && !m.alarmCode.isEmpty()) {
      ev.getAlarmBuilder()
          .setCode(m.alarmCode)
          .setSeverityValue(m.alarmSeverity == null ? 0 : m.alarmSeverity)
          .setText(Message.orEmpty(m.alarmText));
    }
    return ev.build();
  }

  /** The UTF-8 length of {@code s}, counted without encoding it (a pair counts 2 + 2). */
  static long utf8(String s) {
    if (s == null) {
      return 0;
    }
    long n = 0;
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      n += c < 0x80 ? 1 : c < 0x800 ? 2 : Character.isSurrogate(c) ? 2 : 3;
    }
    return n;
  }
}
