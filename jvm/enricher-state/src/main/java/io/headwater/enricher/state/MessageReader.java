package io.headwater.enricher.state;

import java.util.List;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.types.StructType;

/**
 * Rows of the Python hop -> {@link Message}. Columns are found by name once per schema, so the
 * hop may add columns (the operator ignores what it does not know).
 */
final class MessageReader {
  private StructType schema;
  private int kind, tenant, deviceKey, messageId, deviceId, deviceTime, sequence, gateway;
  private int received, site, area, vendor, model, deleted, eStage, eReason, eClass, eMessage;
  private int eventType, sourceFormat, measurements, alarmCode, alarmSeverity, alarmText;
  private int definitions, replaces, pending, units, topic, partition, offset, value, headers;

  Message read(Row r) {
    if (schema != r.schema()) {
      locate(r.schema());
    }
    Message m = new Message();
    m.kind = str(r, kind);
    m.tenant = Message.orEmpty(str(r, tenant));
    m.deviceKey = Message.orEmpty(str(r, deviceKey));
    m.messageId = str(r, messageId);
    m.deviceId = str(r, deviceId);
    m.deviceTimeMs = lng(r, deviceTime);
    m.sequence = lng(r, sequence);
    m.gatewayId = str(r, gateway);
    m.receivedMs = lng(r, received);
    m.site = str(r, site);
    m.areaCode = str(r, area);
    m.vendorFormat = str(r, vendor);
    m.model = str(r, model);
    m.masterDeleted = !r.isNullAt(deleted) && r.getBoolean(deleted);
    m.errorStage = str(r, eStage);
    m.errorReason = str(r, eReason);
    m.errorClass = str(r, eClass);
    m.errorMessage = str(r, eMessage);
    m.eventType = str(r, eventType);
    m.sourceFormat = str(r, sourceFormat);
    for (Row x : rows(r, measurements)) {
      m.measurements.add(
          new Message.Measurement(x.getString(0), x.getDouble(1), x.getString(2), lng(x, 3)));
    }
    m.alarmCode = str(r, alarmCode);
    m.alarmSeverity = r.isNullAt(alarmSeverity) ? null : r.getInt(alarmSeverity);
    m.alarmText = str(r, alarmText);
    for (Row d : rows(r, definitions)) {
      m.definitions.add(
          new Message.Definition(lng(d, 0), d.getString(1), d.getString(2), intOr0(d, 3)));
    }
    m.replacesDefinitions = !r.isNullAt(replaces) && r.getBoolean(replaces);
    for (Row p : rows(r, pending)) {
      m.pending.add(
          new Message.Reading(
              lng(p, 0), p.getString(1), p.getDouble(2), p.getString(3), lng(p, 4), intOr0(p, 5)));
    }
    for (Row u : rows(r, units)) {
      m.units.put(
          u.getString(0), new Conversion(u.getString(1), u.getDouble(2), u.getDouble(3),
              u.getString(4)));
    }
    m.srcTopic = r.getString(topic);
    m.srcPartition = r.getInt(partition);
    m.srcOffset = r.getLong(offset);
    m.value = r.isNullAt(value) ? null : (byte[]) r.get(value);
    for (Row h : rows(r, headers)) {
      m.headers.add(new Message.Header(h.getString(0), h.isNullAt(1) ? null : (byte[]) h.get(1)));
    }
    return m;
  }

  private void locate(StructType s) {
    schema = s;
    kind = s.fieldIndex("kind");
    tenant = s.fieldIndex("tenant");
    deviceKey = s.fieldIndex("device_key");
    messageId = s.fieldIndex("message_id");
    deviceId = s.fieldIndex("device_id");
    deviceTime = s.fieldIndex("device_time_ms");
    sequence = s.fieldIndex("sequence");
    gateway = s.fieldIndex("gateway_id");
    received = s.fieldIndex("received_ms");
    site = s.fieldIndex("site");
    area = s.fieldIndex("area_code");
    vendor = s.fieldIndex("vendor_format");
    model = s.fieldIndex("model");
    deleted = s.fieldIndex("master_deleted");
    eStage = s.fieldIndex("error_stage");
    eReason = s.fieldIndex("error_reason");
    eClass = s.fieldIndex("error_class");
    eMessage = s.fieldIndex("error_message");
    eventType = s.fieldIndex("event_type");
    sourceFormat = s.fieldIndex("source_format");
    measurements = s.fieldIndex("measurements");
    alarmCode = s.fieldIndex("alarm_code");
    alarmSeverity = s.fieldIndex("alarm_severity");
    alarmText = s.fieldIndex("alarm_text");
    definitions = s.fieldIndex("definitions");
    replaces = s.fieldIndex("replaces_definitions");
    pending = s.fieldIndex("pending");
    units = s.fieldIndex("units");
    topic = s.fieldIndex("src_topic");
    partition = s.fieldIndex("src_partition");
    offset = s.fieldIndex("src_offset");
    value = s.fieldIndex("value");
    headers = s.fieldIndex("headers");
  }

  private static String str(Row r, int i) {
    return r.isNullAt(i) ? null : r.getString(i);
  }

  private static Long lng(Row r, int i) {
    return r.isNullAt(i) ? null : r.getLong(i);
  }

  private static int intOr0(Row r, int i) {
    return r.isNullAt(i) ? 0 : r.getInt(i);
  }

  private static List<Row> rows(Row r, int i) {
    return r.isNullAt(i) ? List.of() : r.getList(i);
  }
}
