package io.headwater.enricher.state;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.Test;

class DedupTest {
  @Test
  void hashIsTheFirstEightBytesOfSha256Pinned() {
    // hashlib.sha256(key.encode()).digest()[:8], big-endian signed (pinned in Python).
    assertEquals(-6601797173619086868L, Dedup.hash("m-1"));
    assertEquals(-4848982552615222801L, Dedup.hash("grüße#redrive-2"));
    assertEquals(-2039914840885289964L, Dedup.hash(""));
    // The reused digest carries nothing over from one call to the next.
    assertEquals(-6601797173619086868L, Dedup.hash("m-1"));
  }

  @Test
  void hashesAgreeAcrossThreads() throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(4);
    try {
      List<Future<Long>> got = new ArrayList<>();
      for (int k = 0; k < 64; k++) {
        got.add(pool.submit(() -> Dedup.hash("m-1") ^ Dedup.hash("")));
      }
      for (Future<Long> f : got) {
        assertEquals(-6601797173619086868L ^ -2039914840885289964L, f.get());
      }
    } finally {
      pool.shutdown();
    }
  }
}
