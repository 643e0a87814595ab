package io.headwater.enricher.state;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * A device's Sparkplug B metric definitions from its birth certificates, and alias resolution
 * Capped by count and bytes: a device that sends new names in every DDATA
 * without a birth would otherwise grow its state without end (+36 KB per message, review).
 */
final class Definitions {
  record Metric(String unit, int datatype) {}

  /** alias -> metric name. */
  final Map<Long, String> names = new HashMap<>();
  /** metric name -> (unit as the device wrote it, datatype). */
  final Map<String, Metric> metrics = new HashMap<>();
  /** unit spelling -> conversion (the hop's units module computed it when the unit arrived). */
  final Map<String, Conversion> units = new HashMap<>();
  private long bytes;

  /**
   * Takes a message's definitions (a birth, {@code replace}, drops earlier ones). Nothing
   * changes and {@code DEFINITIONS_LIMIT} is thrown when the result would pass the caps.
   */
  void apply(Message m, int maxCount, long maxBytes) throws NormalizeException {
    Definitions next = m.replacesDefinitions ? new Definitions() : copy();
    for (Message.Definition d : m.definitions) {
      if (d.alias() != null) {
        if (next.names.put(d.alias(), d.name()) == null) {
          next.bytes += 16 + Events.utf8(d.name());
        }
      }
      Metric old = next.metrics.getOrDefault(d.name(), new Metric("", 0));
      String unit = d.unit() == null || d.unit().isEmpty() ? old.unit() : d.unit();
      int datatype = d.datatype() != 0 ? d.datatype() : old.datatype();
      if (next.metrics.put(d.name(), new Metric(unit, datatype)) == null) {
        next.bytes += 16 + Events.utf8(d.name());
      }
      Conversion c = m.units.get(unit);
      if (!unit.isEmpty() && c != null && next.units.put(unit, c) == null) {
        next.bytes += 40 + Events.utf8(unit) + Events.utf8(c.error());
      }
    }
    if (next.metrics.size() > maxCount || next.bytes > maxBytes) {
      throw new NormalizeException("normalize", "DEFINITIONS_LIMIT",
          "Sparkplug definitions of this device would hold " + next.metrics.size()
              + " metrics (" + next.bytes + " bytes); the limit is " + maxCount + " metrics and "
              + maxBytes + " bytes (a birth certificate starts them over)");
    }
    names.clear();
    names.putAll(next.names);
    metrics.clear();
    metrics.putAll(next.metrics);
    units.clear();
    units.putAll(next.units);
    bytes = next.bytes;
  }

  /** Returns the measurements of pending readings, named, typed and converted. */
  List<Message.Measurement> resolve(Message m) throws NormalizeException {
    List<Message.Measurement> out = new ArrayList<>(m.pending.size());
    for (Message.Reading p : m.pending) {
      String name = p.name() != null && !p.name().isEmpty() ? p.name()
          : names.getOrDefault(p.alias() != null ? p.alias() : -1L, "");
      if (name.isEmpty()) {
        throw new NormalizeException("normalize", "PAYLOAD_INVALID", "metric alias "
            + (p.alias() == null ? "None" : p.alias())
            + " is not defined by a birth certificate of this device");
      }
      Metric def = metrics.getOrDefault(name, new Metric("", 0));
      String unit = p.unit() != null && !p.unit().isEmpty() ? p.unit() : def.unit();
      double value = p.value();
      if (p.datatype() == 0 && def.datatype() != 0) {
        if (def.datatype() < 1 || def.datatype() > 11) {
          continue; // e.g. a DateTime sent without its datatype: not a measurement
        }
        if (def.datatype() <= 4) {
          value = signed(value, def.datatype());
        }
      }
      String canonical = "";
      if (!unit.isEmpty()) {
        Conversion c = m.units.getOrDefault(unit, units.get(unit));
        if (c == null) {
          c = new Conversion("", 1, 0, "unknown unit " + Text.repr(unit));
        }
        if (c.failed()) {
          throw new NormalizeException("normalize", "UNIT_UNKNOWN", name + ": " + c.error());
        }
        value = c.apply(value);
        canonical = c.canonical();
      }
      if (!Double.isFinite(value)) {
        throw new NormalizeException("normalize", "PAYLOAD_INVALID",
            name + ": " + Text.pyFloat(value) + " is not a finite number");
      }
      out.add(new Message.Measurement(name, value, canonical, p.timeMs()));
    }
    return out;
  }

  /**
   * The value of a signed integer datatype from its two's complement bits, as the hop's
   * sparkplug.signed reads a reading that states its datatype, applied to the integer part of
   * the value: the reading arrives as a double, and an unsigned 64-bit pattern past 2^53 has
   * already lost its low bits (so Int64 -9 sent without its datatype reads 0; the hop would
   * have to keep integers to fix that).
   */
  static double signed(double value, int datatype) {
    int bits = switch (datatype) {
      case 1 -> 8;
      case 2 -> 16;
      case 3 -> 32;
      default -> 64;
    };
    java.math.BigInteger v = new java.math.BigDecimal(value).toBigInteger();
    java.math.BigInteger range = java.math.BigInteger.ONE.shiftLeft(bits);
    v = v.and(range.subtract(java.math.BigInteger.ONE));
    if (v.testBit(bits - 1)) {
      v = v.subtract(range);
    }
    return v.doubleValue();
  }

  private Definitions copy() {
    Definitions d = new Definitions();
    d.names.putAll(names);
    d.metrics.putAll(metrics);
    d.units.putAll(units);
    d.bytes = bytes;
    return d;
  }

  byte[] encode() {
    Codec.Out o = new Codec.Out();
    o.i32(names.size());
    names.forEach((k, v) -> o.i64(k).str(v));
    o.i32(metrics.size());
    metrics.forEach((k, v) -> o.str(k).str(v.unit()).i32(v.datatype()));
    o.i32(units.size());
    units.forEach((k, c) -> o.str(k).str(c.canonical()).f64(c.scale()).f64(c.offset())
        .str(c.error()));
    o.i64(bytes);
    return o.done();
  }

  static Definitions decode(byte[] value) {
    Definitions d = new Definitions();
    if (value == null) {
      return d;
    }
    Codec.In i = new Codec.In(value);
    for (int n = i.i32(); n > 0; n--) {
      d.names.put(i.i64(), i.str());
    }
    for (int n = i.i32(); n > 0; n--) {
      d.metrics.put(i.str(), new Metric(i.str(), i.i32()));
    }
    for (int n = i.i32(); n > 0; n--) {
      d.units.put(i.str(), new Conversion(i.str(), i.f64(), i.f64(), i.str()));
    }
    d.bytes = i.i64();
    return d;
  }
}
