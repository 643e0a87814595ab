package io.headwater.enricher.state;

import static io.headwater.enricher.state.Fixtures.NOW;
import static io.headwater.enricher.state.Fixtures.batch;
import static io.headwater.enricher.state.Fixtures.deadLetters;
import static io.headwater.enricher.state.Fixtures.events;
import static io.headwater.enricher.state.Fixtures.master;
import static io.headwater.enricher.state.Fixtures.policy;
import static io.headwater.enricher.state.Fixtures.telemetry;
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
  void aliasesResolveToBirthNamesAndConvertAsPythonDoes() {
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
  void aUnitPythonCouldNotConvertIsUnitUnknown() {
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
