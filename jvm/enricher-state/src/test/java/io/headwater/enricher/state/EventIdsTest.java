package io.headwater.enricher.state;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;

import java.util.HashSet;
import java.util.Set;
import org.junit.jupiter.api.Test;

class EventIdsTest {
  @Test
  void matchesThePinnedIdsOfAsciiParts() {
    assertEquals(Expected.ASCII, EventIds.of("acme", "dev-1", "m-1", 0));
    assertEquals(Expected.ASCII, EventIds.of("acme", "dev-1", "m-1", 0)); // stable
  }

  @Test
  void matchesThePinnedIdsOfNonAsciiAndControlCharacters() {
    assertEquals(Expected.UNICODE, EventIds.of("t\u00e9", "d\"\\\n\u007f", "\ud83d\ude00x", 3));
  }

  @Test
  void isAVersion5UuidScopedByTenantDeviceAndIndex() {
    String id = EventIds.of("t", "d", "m1", 0);
    assertEquals('5', id.charAt(14)); // the version nibble
    assertNotEquals(id, EventIds.of("t", "d", "m1", 1));
    Set<String> ids = new HashSet<>();
    for (String tenant : new String[] {"ta", "tb"}) {
      for (String device : new String[] {"d1", "d2"}) {
        ids.add(EventIds.of(tenant, device, "1", 0));
      }
    }
    assertEquals(4, ids.size(), "message ids are unique per tenant and device only");
    // The JSON name keeps the parts apart: no separator inside a part can forge another's id.
    assertNotEquals(EventIds.of("a/b", "c", "m", 0), EventIds.of("a", "b/c", "m", 0));
  }
}
