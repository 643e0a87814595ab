package io.headwater.enricher.state;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashSet;
import java.util.Random;
import java.util.Set;
import org.junit.jupiter.api.Test;

class LongSetTest {
  @Test
  void behavesAsASetOfLongs() {
    // Against HashSet<Long>, with zero, extremes, repeats and growth past several rehashes.
    Random r = new Random(27);
    LongSet got = new LongSet();
    Set<Long> want = new HashSet<>();
    long[] special = {0L, -1L, Long.MIN_VALUE, Long.MAX_VALUE, 1L};
    for (int round = 0; round < 3; round++) {
      for (int k = 0; k < 20_000; k++) {
        long v = k % 7 == 0 ? special[r.nextInt(special.length)]
            : k % 3 == 0 ? r.nextInt(500) : r.nextLong();
        assertEquals(want.add(v), got.add(v), "add " + v);
        long probe = r.nextBoolean() ? v + 1 : r.nextLong();
        assertEquals(want.contains(probe), got.contains(probe), "contains " + probe);
      }
      assertEquals(want.size(), got.size());
      for (long v : want) {
        assertTrue(got.contains(v));
      }
      got.clear();
      want.clear();
      assertFalse(got.contains(0L));
      assertFalse(got.contains(special[2]));
      got.ensure(round * 5000);
    }
  }
}
