package io.headwater.enricher.state;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;

/**
 * The dedup as it was before its recent tier was read in place (main at 160ddf9: three arrays
 * decoded and encoded whole, a {@code HashSet<Long>}), kept unchanged as DedupTest's reference:
 * the dedup must decide, spill and write the same bytes.
 */
final class Format1Dedup {
  static final long HOUR_MS = 3_600_000L;
  static final int NO_HOUR = -1;
  private static final double SPILL_SLACK = 1.0 / 6;

  /** The older tier: sorted id hashes per device-time hour. */
  interface Older {
    long[] get(long hour);

    void put(long hour, long[] ids);

    void remove(long hour);
  }

  /** The recent tier, as kept in the composite value. */
  record Recent(long[] h, long[] t, int[] hour) {
    static final Recent EMPTY = new Recent(new long[0], new long[0], new int[0]);

    void write(Codec.Out o) {
      o.i32(h.length);
      for (int k = 0; k < h.length; k++) {
        o.i64(h[k]).i64(t[k]).i32(hour[k]);
      }
    }

    static Recent read(Codec.In i) {
      int n = i.i32();
      Recent r = new Recent(new long[n], new long[n], new int[n]);
      for (int k = 0; k < n; k++) {
        r.h[k] = i.i64();
        r.t[k] = i.i64();
        r.hour[k] = i.i32();
      }
      return r;
    }
  }

  private final Older older;
  private final long windowMs;
  private final long horizonMs;
  private final Set<Long> seen = new HashSet<>();
  private final Set<Long> loadedHours = new HashSet<>();
  private final List<long[]> added = new ArrayList<>(); // {hash, batch ms, hour}
  private Recent recent = Recent.EMPTY;
  private TreeSet<Long> spilled = new TreeSet<>();

  Format1Dedup(Older older, long windowMs, long horizonMs) {
    this.older = horizonMs > windowMs ? older : null;
    this.windowMs = windowMs;
    this.horizonMs = horizonMs;
  }

  /** Loads the recent tier of a device (from its composite value). */
  void begin(Recent recent, long[] spilledHours) {
    this.recent = recent;
    spilled = new TreeSet<>();
    for (long h : spilledHours) {
      spilled.add(h);
    }
    seen.clear();
    loadedHours.clear();
    added.clear();
    for (long h : recent.h()) {
      seen.add(h);
    }
  }

  /** Returns true (and remembers the id) unless {@code key} was seen within the horizon. */
  boolean firstTime(String key, Long deviceTimeMs, long nowMs) {
    long h = hash(key);
    long t = Message.orZero(deviceTimeMs);
    long hour = Math.floorDiv(t, HOUR_MS);
    if (older != null && spilled.contains(hour) && loadedHours.add(hour)) {
      for (long id : older.get(hour)) {
        seen.add(id);
      }
    }
    if (!seen.add(h)) {
      return false;
    }
    boolean near = Math.abs(t - nowMs) <= horizonMs;
    added.add(new long[] {h, nowMs, near ? hour : NO_HOUR});
    return true;
  }

  /**
   * Returns the new recent tier, and moves ids past the window to the older tier (or forgets
   * them) once the oldest is a sixth of a window past it; forgets older hours past the horizon.
   * Returns null when nothing changed.
   */
  Recent commit(long nowMs) {
    int n = recent.h().length;
    int total = n + added.size();
    long[] h = Arrays.copyOf(recent.h(), total);
    long[] t = Arrays.copyOf(recent.t(), total);
    int[] hr = Arrays.copyOf(recent.hour(), total);
    for (int k = 0; k < added.size(); k++) {
      long[] a = added.get(k);
      h[n + k] = a[0];
      t[n + k] = a[1];
      hr[n + k] = (int) a[2];
    }
    boolean changed = !added.isEmpty();
    long cutoff = nowMs - windowMs;
    long min = Long.MAX_VALUE;
    for (long x : t) {
      min = Math.min(min, x);
    }
    if (total > 0 && min <= cutoff - (long) (windowMs * SPILL_SLACK)) {
      int keep = 0;
      java.util.Map<Long, List<Long>> byHour = new java.util.TreeMap<>();
      for (int k = 0; k < total; k++) {
        if (t[k] <= cutoff) {
          if (hr[k] != NO_HOUR) {
            byHour.computeIfAbsent((long) hr[k], x -> new ArrayList<>()).add(h[k]);
          }
        } else {
          h[keep] = h[k];
          t[keep] = t[k];
          hr[keep] = hr[k];
          keep++;
        }
      }
      spill(byHour);
      h = Arrays.copyOf(h, keep);
      t = Arrays.copyOf(t, keep);
      hr = Arrays.copyOf(hr, keep);
      changed = true;
    }
    long oldestHour = Math.floorDiv(nowMs - horizonMs, HOUR_MS) - 1;
    if (!spilled.isEmpty() && spilled.first() < oldestHour) {
      for (Long hour : new ArrayList<>(spilled.headSet(oldestHour))) {
        if (older != null) {
          older.remove(hour);
        }
        spilled.remove(hour);
      }
      changed = true;
    }
    added.clear();
    recent = new Recent(h, t, hr);
    return changed ? recent : null;
  }

  long[] spilledHours() {
    return spilled.stream().mapToLong(Long::longValue).toArray();
  }

  private void spill(java.util.Map<Long, List<Long>> byHour) {
    if (older == null) {
      return; // no older tier: ids past the window are forgotten
    }
    for (java.util.Map.Entry<Long, List<Long>> e : byHour.entrySet()) {
      TreeSet<Long> ids = new TreeSet<>();
      if (spilled.contains(e.getKey())) {
        for (long id : older.get(e.getKey())) {
          ids.add(id);
        }
      }
      ids.addAll(e.getValue());
      older.put(e.getKey(), ids.stream().mapToLong(Long::longValue).toArray());
      spilled.add(e.getKey());
    }
  }

  /** The 64-bit hash of an id (first 8 bytes of SHA-256). */
  static long hash(String key) {
    MessageDigest sha;
    try {
      sha = MessageDigest.getInstance("SHA-256");
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("every JVM has SHA-256", e);
    }
    byte[] d = sha.digest(key.getBytes(StandardCharsets.UTF_8));
    long x = 0;
    for (int i = 0; i < 8; i++) {
      x = (x << 8) | (d[i] & 0xff);
    }
    return x;
  }

  /** The id a message is deduplicated by: its message id, per redrive (dedupe.dedup_key). */
  static String key(Message m) {
    byte[] count = m.header("redrive-count");
    String id = Message.orEmpty(m.messageId);
    if (count == null || count.length == 0) {
      return id;
    }
    return id + "#redrive-" + Text.ascii(count);
  }
}
