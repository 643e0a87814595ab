package io.headwater.enricher.state;

import static io.headwater.enricher.state.Fixtures.NOW;
import static io.headwater.enricher.state.Fixtures.batch;
import static io.headwater.enricher.state.Fixtures.deadLetters;
import static io.headwater.enricher.state.Fixtures.events;
import static io.headwater.enricher.state.Fixtures.master;
import static io.headwater.enricher.state.Fixtures.policy;
import static io.headwater.enricher.state.Fixtures.telemetry;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import headwater.events.v1.EventOuterClass.Event;
import java.util.List;
import org.apache.spark.sql.Row;
import org.junit.jupiter.api.Test;

class SparkplugTest {
  private static final Conversion DEG_F =
      new Conversion("celsius", 0.5555555555555429, -17.777777777777743, "");

  private static Message birth(String id, long seq, String name, long alias) {
    Message m = telemetry(id, seq);
    m.measurements.clear();
    m.sourceFormat = "sparkplug";
    m.replacesDefinitions = true;
    m.definitions.add(new Message.Definition(alias, name, "degF", 10));
    m.units.put("degF", DEG_F);
    return m;
  }

  private static Message data(String id, long seq, int readings) {
    Message m = telemetry(id, seq);
    m.measurements.clear();
    m.sourceFormat = "sparkplug";
    for (int i = 0; i < readings; i++) {
      m.pending.add(new Message.Reading(1L, "", 70.7, "", null, 0));
    }
    return m;
  }

  @Test
  void aliasesResolveToBirthNamesAndConvertAsTheUnitsModuleDoes() {
    MemoryDeviceStore store = new MemoryDeviceStore();
    Policy p = policy("");
    batch(p, store, NOW, master(), birth("b", 1, "Boiler/Temp", 1));
    List<Row> out = batch(p, store, NOW + 1, data("d", 2, 1)); // a later batch: from state
    Event e = events(out).get(0);
    assertEquals("Boiler/Temp", e.getMeasurements(0).getName());
    // units.convert(70.7, "degF") == 21.5 in Python (12 significant digits).
    assertEquals(21.5, e.getMeasurements(0).getValue());
    assertEquals("celsius", e.getMeasurements(0).getUnit());
  }

  private static Message.Reading byAlias(long alias, double value) {
    return new Message.Reading(alias, "", value, "", null, 0);
  }

  @Test
  void aBirthsOwnReadingsAreMeasuredAndItsDatatypesApplyToDataByAlias() {
    MemoryDeviceStore store = new MemoryDeviceStore();
    Policy p = policy("");
    Message b = birth("b", 1, "Temp", 1);
    b.definitions.add(new Message.Definition(2L, "Offset", "", 2)); // Int16
    b.definitions.add(new Message.Definition(3L, "Started", "", 13)); // DateTime
    b.pending.add(new Message.Reading(1L, "Temp", 70.7, "degF", NOW, 10));
    Event born = events(batch(p, store, NOW, master(), b)).get(0);
    assertEquals("Temp", born.getMeasurements(0).getName());
    assertEquals(21.5, born.getMeasurements(0).getValue());
    assertEquals(NOW, born.getMeasurements(0).getTime().getSeconds() * 1000
        + born.getMeasurements(0).getTime().getNanos() / 1_000_000);
    Message d = data("d", 2, 0);
    d.pending.add(byAlias(2, 0xffff)); // no datatype: Int16 from the birth -> -1
    d.pending.add(byAlias(3, 1.7e12)); // DateTime: not a measurement
    Event e = events(batch(p, store, NOW + 1, d)).get(0);
    assertEquals(1, e.getMeasurementsCount());
    assertEquals("Offset", e.getMeasurements(0).getName());
    assertEquals(-1.0, e.getMeasurements(0).getValue());
  }

  @Test
  void aRebirthReplacesTheAliases() {
    MemoryDeviceStore store = new MemoryDeviceStore();
    Policy p = policy("");
    Message first = birth("b1", 1, "Temp", 1);
    first.definitions.add(new Message.Definition(2L, "Pressure", "", 10));
    batch(p, store, NOW, master(), first);
    Message again = birth("b2", 2, "Flow", 1);
    batch(p, store, NOW + 1, again);
    assertEquals(java.util.Map.of(1L, "Flow"), Definitions.decode(store.definitions).names);
    Message d = data("d", 3, 0);
    d.pending.add(byAlias(1, 3.0));
    assertEquals("Flow", events(batch(p, store, NOW + 2, d)).get(0).getMeasurements(0).getName());
    Message gone = data("g", 4, 0);
    gone.pending.add(byAlias(2, 1.0));
    assertEquals("metric alias 2 is not defined by a birth certificate of this device",
        deadLetters(batch(p, store, NOW + 3, gone)).get(0).getErrorMessage());
  }

  @Test
  void definitionsSurviveTheStateRoundTrip() {
    MemoryDeviceStore store = new MemoryDeviceStore();
    batch(policy(""), store, NOW, master(), birth("b", 1, "Boiler/Temp", 1));
    Definitions read = Definitions.decode(store.definitions);
    assertEquals(java.util.Map.of(1L, "Boiler/Temp"), read.names);
    assertEquals(new Definitions.Metric("degF", 10), read.metrics.get("Boiler/Temp"));
    assertEquals(DEG_F, read.units.get("degF"));
    assertArrayEquals(store.definitions, read.encode());
  }

  @Test
  void anUndefinedAliasIsADeadLetter() {
    MemoryDeviceStore store = new MemoryDeviceStore();
    List<Row> out = batch(policy(""), store, NOW, master(), data("d", 1, 1));
    assertEquals("PAYLOAD_INVALID", deadLetters(out).get(0).getReason());
    assertEquals("metric alias 1 is not defined by a birth certificate of this device",
        deadLetters(out).get(0).getErrorMessage());
  }

  @Test
  void definitionsAreCappedByCount() {
    // Review defect: definitions only grew until a birth (+36 KB per DDATA with new names).
    Policy p = policy("max_definitions=3\n");
    MemoryDeviceStore store = new MemoryDeviceStore();
    batch(p, store, NOW, master(), birth("b", 1, "a", 1));
    Message grow = telemetry("g", 2);
    grow.measurements.clear();
    for (int i = 0; i < 3; i++) {
      grow.definitions.add(new Message.Definition(null, "new-" + i, "", 10));
    }
    List<Row> out = batch(p, store, NOW + 1, grow);
    assertEquals("DEFINITIONS_LIMIT", deadLetters(out).get(0).getReason());
    assertEquals(1, Definitions.decode(store.definitions).metrics.size(), "state unchanged");
  }

  @Test
  void definitionsAreCappedByBytes() {
    Policy p = policy("max_definition_bytes=1000\n");
    MemoryDeviceStore store = new MemoryDeviceStore();
    List<Row> out = batch(p, store, NOW, master(), birth("b", 1, "x".repeat(2000), 1));
    assertEquals("DEFINITIONS_LIMIT", deadLetters(out).get(0).getReason());
    assertNull(store.definitions);
  }

  @Test
  void anEventOverItsSizeBoundIsADeadLetterBeforeItIsBuilt() {
    // Review defect: alias-only metrics multiplied a long birth name (12 KB DDATA -> 40 MB).
    Policy p = policy("");
    MemoryDeviceStore store = new MemoryDeviceStore();
    batch(p, store, NOW, master(), birth("b", 1, "n".repeat(20_000), 1));
    List<Row> out = batch(p, store, NOW + 1, data("d", 2, 100));
    assertEquals(List.of(), events(out));
    assertEquals("EVENT_TOO_LARGE", deadLetters(out).get(0).getReason());
    assertEquals("enrich", deadLetters(out).get(0).getStage());
    assertEquals("EventTooLargeError", deadLetters(out).get(0).getErrorClass());
  }

  @Test
  void aUnitTheHopCouldNotConvertIsUnitUnknown() {
    MemoryDeviceStore store = new MemoryDeviceStore();
    Message m = data("d", 1, 0);
    m.pending.add(new Message.Reading(null, "speed", 3.0, "furlong", null, 10));
    m.units.put("furlong", new Conversion("", 0, 0, "unknown unit 'furlong'"));
    List<Row> out = batch(policy(""), store, NOW, master(), m);
    assertEquals("UNIT_UNKNOWN", deadLetters(out).get(0).getReason());
    assertEquals("speed: unknown unit 'furlong'", deadLetters(out).get(0).getErrorMessage());
  }

  @Test
  void signedDatatypesReadTwosComplement() {
    assertEquals(-2.0, Definitions.signed(0xfffe, 2));
    assertEquals(-2.0, Definitions.signed(0xfffffffeL, 2));
    // Python: signed(int(float(2**64 - 9)), 4) == 0 (the double rounded to 2**64).
    assertEquals(0.0, Definitions.signed(18446744073709551607.0, 4));
    assertEquals(-7.0, Definitions.signed(4294967289.0, 3));
  }
}
