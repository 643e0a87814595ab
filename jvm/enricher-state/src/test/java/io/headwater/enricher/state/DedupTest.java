package io.headwater.enricher.state;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
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

  /** An older tier in memory. */
  static final class MemoryOlder implements Dedup.Older, Format1Dedup.Older {
    final Map<Long, long[]> hours = new HashMap<>();
    int reads;

    @Override
    public long[] get(long hour) {
      reads++;
      return hours.getOrDefault(hour, new long[0]);
    }

    @Override
    public void put(long hour, long[] ids) {
      hours.put(hour, ids.clone());
    }

    @Override
    public void remove(long hour) {
      hours.remove(hour);
    }
  }

  /** One device's dedup across batches, carrying its composite value's two fields. */
  private static final class Device {
    final MemoryOlder older = new MemoryOlder();
    final long windowMs;
    final long horizonMs;
    final int maxRecent;
    final int maxPerHour;
    Dedup.Recent recent = Dedup.Recent.EMPTY;
    long[] spilled = new long[0];
    long forgotten;

    Device(long windowMs, long horizonMs) {
      this(windowMs, horizonMs, Policy.DEFAULT_DEDUP_MAX_RECENT_IDS,
          Policy.DEFAULT_DEDUP_MAX_IDS_PER_HOUR);
    }

    Device(long windowMs, long horizonMs, int maxRecent, int maxPerHour) {
      this.windowMs = windowMs;
      this.horizonMs = horizonMs;
      this.maxRecent = maxRecent;
      this.maxPerHour = maxPerHour;
    }

    /** Returns firstTime of each (id, device time) in order, then commits the batch. */
    List<Boolean> batch(long nowMs, Object... idsAndTimes) {
      Dedup d = new Dedup(older, windowMs, horizonMs, maxRecent, maxPerHour);
      d.begin(recent, spilled);
      List<Boolean> out = new ArrayList<>();
      for (int k = 0; k < idsAndTimes.length; k += 2) {
        out.add(d.firstTime((String) idsAndTimes[k], (Long) idsAndTimes[k + 1], nowMs));
      }
      Dedup.Recent next = d.commit(nowMs);
      if (next != null) {
        recent = next;
        spilled = d.spilledHours();
      }
      forgotten += d.forgotten();
      return out;
    }
  }

  private static final long HOUR = Dedup.HOUR_MS;
  private static final long DAY = 24 * HOUR;
  private static final long HORIZON = 7 * DAY + HOUR;
  private static final long T0 = 1_800_000_000_000L; // a batch time in 2027

  @Test
  void repeatsWithinABatchAndTheWindowAreDuplicates() {
    Device d = new Device(HOUR, HORIZON);
    assertEquals(List.of(true, true, false), d.batch(T0, "m1", T0, "m2", T0, "m1", T0));
    assertEquals(List.of(false, true), d.batch(T0 + 30 * 60_000L, "m2", T0, "m3", T0));
    assertTrue(d.older.hours.isEmpty(), "nothing moved yet: the window holds them");
  }

  @Test
  void aResendAfterDaysIsADuplicateAndLiveTrafficReadsNoOlderHours() {
    Device d = new Device(HOUR, HORIZON);
    d.batch(T0, "old", T0 - 10_000);
    // Live traffic two hours later moves "old" to the older tier (its device-time hour).
    d.batch(T0 + 2 * HOUR, "live-1", T0 + 2 * HOUR);
    assertEquals(Set.of(Math.floorDiv(T0 - 10_000, HOUR)), d.older.hours.keySet());
    int reads = d.older.reads;
    d.batch(T0 + 2 * HOUR + 1000, "live-2", T0 + 2 * HOUR + 1000);
    assertEquals(reads, d.older.reads, "a live message's hour holds no ids: no read");
    // The gateway resends "old" (same envelope, same device time) six days later.
    assertEquals(List.of(false, true),
        d.batch(T0 + 6 * DAY, "old", T0 - 10_000, "new", T0 + 6 * DAY));
  }

  @Test
  void withoutAnOlderTierALateResendPasses() {
    // The horizon is the window: the test above would fail without the older tier.
    Device d = new Device(HOUR, HOUR);
    d.batch(T0, "old", T0);
    d.batch(T0 + 2 * HOUR, "live", T0 + 2 * HOUR);
    assertTrue(d.older.hours.isEmpty());
    assertEquals(List.of(true), d.batch(T0 + 3 * HOUR, "old", T0));
  }

  @Test
  void hoursPastTheHorizonAreForgotten() {
    Device d = new Device(HOUR, HORIZON);
    d.batch(T0, "old", T0);
    d.batch(T0 + 2 * HOUR, "live", T0 + 2 * HOUR);
    assertTrue(!d.older.hours.isEmpty());
    d.batch(T0 + 9 * DAY, "later", T0 + 9 * DAY);
    assertTrue(!d.older.hours.containsKey(Math.floorDiv(T0, HOUR)));
    assertEquals(List.of(true), d.batch(T0 + 9 * DAY + 1, "old", T0)); // beyond the horizon
  }

  @Test
  void aMessageWithoutAPlausibleDeviceTimeIsKeptForTheWindowOnly() {
    Device d = new Device(HOUR, HORIZON);
    d.batch(T0, "clockless", 0L);
    d.batch(T0 + 2 * HOUR, "live", T0 + 2 * HOUR);
    assertTrue(!d.older.hours.containsKey(0L), "never filed under 1970");
    assertEquals(List.of(true), d.batch(T0 + 2 * HOUR + 1, "clockless", 0L));
    Device unset = new Device(HOUR, HORIZON);
    unset.batch(T0, "no-time", null);
    assertEquals(List.of(false), unset.batch(T0 + 1, "no-time", null), "within the window");
  }

  @Test
  void aReplayedBatchDecidesAsTheFirstRun() {
    Device d = new Device(HOUR, HORIZON);
    d.batch(T0, "a", T0);
    Dedup.Recent recent = d.recent;
    long[] spilled = d.spilled.clone();
    Map<Long, long[]> older = new HashMap<>(d.older.hours);
    List<Boolean> first = d.batch(T0 + 2 * HOUR, "a", T0, "b", T0 + 2 * HOUR);
    // The state as the checkpoint kept it, then the same batch again.
    d.recent = recent;
    d.spilled = spilled;
    d.older.hours.clear();
    d.older.hours.putAll(older);
    assertEquals(first, d.batch(T0 + 2 * HOUR, "a", T0, "b", T0 + 2 * HOUR));
  }

  @Test
  void recentTierBytesAreFormatOne() throws IOException {
    // As Recent.write wrote the three arrays: count, then (hash, batch ms, hour) per id.
    long[] h = {-1L, 0L, Long.MIN_VALUE};
    long[] t = {1_700_000_000_000L, 1_700_000_000_500L, 1_700_000_001_000L};
    int[] hour = {472_222, Dedup.NO_HOUR, Integer.MAX_VALUE};
    ByteArrayOutputStream expected = new ByteArrayOutputStream();
    DataOutputStream d = new DataOutputStream(expected);
    d.writeByte(Codec.VERSION);
    d.writeLong(99);
    d.writeInt(3);
    for (int k = 0; k < 3; k++) {
      d.writeLong(h[k]);
      d.writeLong(t[k]);
      d.writeInt(hour[k]);
    }
    d.writeInt(7);
    Dedup.Recent first = Dedup.Recent.of(h, t, hour, 1);
    Dedup.Recent all = first.append(new long[] {h[1], h[2]}, new long[] {t[1], t[2]},
        new int[] {hour[1], hour[2]}, 2);
    Codec.Out o = new Codec.Out().i64(99);
    all.write(o);
    byte[] got = o.i32(7).done();
    assertArrayEquals(expected.toByteArray(), got);
    assertEquals(1, first.size()); // append leaves the tier it was called on as it was

    Codec.In in = new Codec.In(got);
    assertEquals(99, in.i64());
    Dedup.Recent read = Dedup.Recent.read(in);
    assertEquals(7, in.i32());
    for (int k = 0; k < 3; k++) {
      assertEquals(h[k], read.h(k));
      assertEquals(t[k], read.t(k));
      assertEquals(hour[k], read.hour(k));
    }
    // A count past the value's end is refused, as a value cut short.
    byte[] cut = new Codec.Out().i32(4).i64(1).done();
    assertThrows(IllegalStateException.class, () -> Dedup.Recent.read(new Codec.In(cut)));
    byte[] huge = new Codec.Out().i32(Integer.MAX_VALUE / Dedup.Recent.ENTRY).done();
    assertThrows(IllegalStateException.class, () -> Dedup.Recent.read(new Codec.In(huge)));
    byte[] negative = new Codec.Out().i32(-1).done();
    assertThrows(IllegalStateException.class, () -> Dedup.Recent.read(new Codec.In(negative)));
  }

  @Test
  void decidesSpillsAndWritesAsTheFormatOneDedup() {
    // Random batches of one device (repeats, resends hours later, clocks far off, gaps of days)
    // through this dedup and the reference, each reading back what it wrote: the same
    // decisions, the same recent-tier bytes, the same ids in the older tier, the same filed hours.
    long window = 3_600_000L;
    long[][] policies = {{window, 7 * 86_400_000L + window}, {window, window}, {600_000L,
        86_400_000L}};
    for (long[] policy : policies) {
      for (int seed = 0; seed < 20; seed++) {
        compare(new Random(seed), policy[0], policy[1]);
      }
    }
  }

  private static void compare(Random r, long windowMs, long horizonMs) {
    MemoryOlder olderA = new MemoryOlder();
    MemoryOlder olderB = new MemoryOlder();
    byte[] stateA = null;
    byte[] stateB = null;
    long[] spilledA = new long[0];
    long[] spilledB = new long[0];
    long now = 1_700_000_000_000L + r.nextInt(1_000_000);
    List<String> keys = new ArrayList<>();
    List<Long> times = new ArrayList<>();
    int decisions = 0;
    int duplicates = 0;
    for (int batch = 0; batch < 400; batch++) {
      int step = r.nextInt(100);
      now += step < 70 ? r.nextInt(5_000) : step < 95 ? r.nextInt(900_000)
          : step < 99 ? r.nextInt(6 * 3_600_000) : r.nextInt(3) * 86_400_000L;
      Dedup a = new Dedup(olderA, windowMs, horizonMs, Policy.DEFAULT_DEDUP_MAX_RECENT_IDS,
          Policy.DEFAULT_DEDUP_MAX_IDS_PER_HOUR);
      Format1Dedup b = new Format1Dedup(olderB, windowMs, horizonMs);
      a.begin(stateA == null ? Dedup.Recent.EMPTY : Dedup.Recent.read(new Codec.In(stateA)),
          spilledA);
      b.begin(stateB == null ? Format1Dedup.Recent.EMPTY
          : Format1Dedup.Recent.read(new Codec.In(stateB)), spilledB);
      int n = r.nextInt(10) == 0 ? 0 : r.nextInt(40);
      for (int k = 0; k < n; k++) {
        String key;
        Long deviceTime;
        if (!keys.isEmpty() && r.nextInt(3) == 0) { // a resend: same id, same device time
          int i = r.nextInt(keys.size());
          key = keys.get(i);
          deviceTime = times.get(i);
          if (r.nextInt(20) == 0) {
            deviceTime = deviceTime == null ? 0L : deviceTime + 3_600_000L; // same id, other hour
          }
        } else {
          key = "m-" + r.nextInt(1 << 20);
          int clock = r.nextInt(20);
          deviceTime = clock == 0 ? null : clock == 1 ? now - 30 * 86_400_000L
              : clock == 2 ? now + 400_000_000L : now - r.nextInt(120_000);
          keys.add(key);
          times.add(deviceTime);
        }
        boolean first = b.firstTime(key, deviceTime, now);
        assertEquals(first, a.firstTime(key, deviceTime, now), "batch " + batch + " id " + key);
        decisions++;
        duplicates += first ? 0 : 1;
      }
      Dedup.Recent ra = a.commit(now);
      Format1Dedup.Recent rb = b.commit(now);
      assertEquals(rb == null, ra == null, "changed, batch " + batch);
      if (ra != null) {
        Codec.Out oa = new Codec.Out();
        ra.write(oa);
        stateA = oa.done();
        Codec.Out ob = new Codec.Out();
        rb.write(ob);
        stateB = ob.done();
        assertArrayEquals(stateB, stateA, "recent tier bytes, batch " + batch);
        spilledA = a.spilledHours();
        spilledB = b.spilledHours();
        assertArrayEquals(spilledB, spilledA, "filed hours, batch " + batch);
      }
      assertEquals(olderB.hours.keySet(), olderA.hours.keySet());
      for (Map.Entry<Long, long[]> e : olderB.hours.entrySet()) {
        // The same ids; this dedup keeps an hour in the order its ids were filed (its bound
        // forgets the oldest), the reference sorted.
        long[] filed = olderA.hours.get(e.getKey()).clone();
        java.util.Arrays.sort(filed);
        assertArrayEquals(e.getValue(), filed, "hour " + e.getKey());
      }
    }
    assertEquals(olderB.reads, olderA.reads, "older-tier reads");
    assertTrue(decisions > 1000 && duplicates > 100, decisions + " ids, " + duplicates + " dups");
    if (horizonMs > windowMs) {
      assertTrue(olderA.reads > 10, "resends found in the older tier: " + olderA.reads);
    }
  }
}
