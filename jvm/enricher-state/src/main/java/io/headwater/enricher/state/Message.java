package io.headwater.enricher.state;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * One decoded, normalized record of a device as the Python hop wrote it (schema.py's
 * DECODED_FIELDS + NORMALIZED_FIELDS + SOURCE_FIELDS + {@code units}), or a master record.
 * Plain fields: the processor mutates {@code measurements} when Sparkplug readings resolve.
 */
final class Message {
  record Measurement(String name, double value, String unit, Long timeMs) {}

  record Definition(Long alias, String name, String unit, int datatype) {}

  record Reading(Long alias, String name, double value, String unit, Long timeMs, int datatype) {}

  record Header(String key, byte[] value) {}

  // Identity
  String kind = "ingest";
  String tenant = "";
  String deviceKey = "";
  String messageId;
  String deviceId;
  Long deviceTimeMs;
  Long sequence;
  String gatewayId;
  Long receivedMs;
  // Master data (kind == "master")
  String site;
  String areaCode;
  String vendorFormat;
  String model;
  boolean masterDeleted;
  // Errors of decode or normalize (the Python hop)
  String errorStage;
  String errorReason;
  String errorClass;
  String errorMessage;
  // Normalized content
  String eventType;
  String sourceFormat;
  List<Measurement> measurements = new ArrayList<>();
  String alarmCode;
  Integer alarmSeverity;
  String alarmText;
  List<Definition> definitions = new ArrayList<>();
  boolean replacesDefinitions;
  List<Reading> pending = new ArrayList<>();
  /** Unit spelling -> its conversion, for every unit this message's Sparkplug parts name. */
  Map<String, Conversion> units = new HashMap<>();
  // Source
  String srcTopic = "";
  int srcPartition;
  long srcOffset;
  byte[] value;
  List<Header> headers = new ArrayList<>();

  boolean isMaster() {
    return "master".equals(kind);
  }

  boolean hasError() {
    return errorReason != null && !errorReason.isEmpty();
  }

  boolean decodeFailed() {
    return "decode".equals(errorStage);
  }

  /** Returns the value of the last header named {@code key}, or null (as decode.header_map). */
  byte[] header(String key) {
    byte[] found = null;
    for (Header h : headers) {
      if (h.key().equals(key)) {
        found = h.value() == null ? new byte[0] : h.value();
      }
    }
    return found;
  }

  /** The Kafka coordinate, the id that ties a message's events to its completion. */
  String ref() {
    return srcTopic + "/" + srcPartition + "/" + srcOffset;
  }

  static String orEmpty(String s) {
    return s == null ? "" : s;
  }

  static long orZero(Long v) {
    return v == null ? 0L : v;
  }
}
