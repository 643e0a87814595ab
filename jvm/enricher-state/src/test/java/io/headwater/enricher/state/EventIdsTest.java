package io.headwater.enricher.state;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

class EventIdsTest {
  // Expected values from services/enricher/python_operator/enrich.py event_id (Python), pinned
  // here.
  @Test
  void matchesPythonForAsciiIds() {
    assertEquals(Expected.ASCII, EventIds.of("acme", "dev-1", "m-1", 0));
  }

  @Test
  void matchesPythonForNonAsciiAndControlCharacters() {
    assertEquals(Expected.UNICODE, EventIds.of("t\u00e9", "d\"\\\n\u007f", "\ud83d\ude00x", 3));
  }
}
