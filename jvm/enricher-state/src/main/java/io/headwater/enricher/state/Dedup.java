package io.headwater.enricher.state;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;

/**
 * Drop repeats of a message id for as long as gateways resend (7 days by default), in two tiers.
 *
 * <p><b>recent</b>: ids first seen within the window, with their first-seen batch time and the
 * hour of their device time, inside the device's composite value (no state call of its own).
 * <b>older</b>: ids past the window up to the horizon, one array per device-time hour in a
 * map state, in the order they were filed (a release before the bounds kept them sorted);
 * only hours known to hold ids ({@code spilledHours}) are read. Ids move there in bulk once
 * the oldest recent id is a sixth of a window past it. Everything counts in micro-batch time,
 * so a replay decides as the first run did. Ids are 64-bit hashes.
 *
 * <p>Both tiers are bounded, whatever a device's rate: past {@code maxRecent} ids the oldest
 * recent ids move to the older tier early (down to a sixth below the bound, so a fast device
 * spills every few batches, not every batch), and an older hour keeps at most {@code
 * maxPerHour} ids, the oldest filed going first. What a bound drops is forgotten (counted in
 * {@link #forgotten()}): a resend of it is enriched again, never lost (consumers upsert by id).
 */
final class Dedup {
  static final long HOUR_MS = 3_600_000L;
  static final int NO_HOUR = -1;
  private static final double SPILL_SLACK = 1.0 / 6;

  /** The older tier: id hashes per device-time hour, oldest filed first. */
  interface Older {
    long[] get(long hour);

    void put(long hour, long[] ids);

    void remove(long hour);
  }

  /**
   * The recent tier, as kept in the composite value: {@code size()} entries of {@link #ENTRY}
   * bytes (id hash, first-seen batch ms, device-time hour; big-endian), read in place from the
   * value's bytes. A batch reads the hashes into a {@link LongSet}, appends its new ids to the
   * bytes, and decodes the entries only when it spills; the bytes are those the tier had as
   * three arrays (format 1).
   */
  static final class Recent {
    static final int ENTRY = 20;
    static final Recent EMPTY = new Recent(new byte[0], 0, 0);

    private final byte[] b;
    private final int off;
    private final int n;

    private Recent(byte[] b, int off, int n) {
      this.b = b;
      this.off = off;
      this.n = n;
    }

    int size() {
      return n;
    }

    long h(int k) {
      return Codec.i64(b, off + k * ENTRY);
    }

    long t(int k) {
      return Codec.i64(b, off + k * ENTRY + 8);
    }

    int hour(int k) {
      return Codec.i32(b, off + k * ENTRY + 16);
    }

    /** The tier of these entries, in this order. */
    static Recent of(long[] h, long[] t, int[] hour, int count) {
      byte[] b = new byte[count * ENTRY];
      for (int k = 0; k < count; k++) {
        put(b, k * ENTRY, h[k], t[k], hour[k]);
      }
      return new Recent(b, 0, count);
    }

    /** This tier with {@code count} entries appended (this one is left as it is). */
    Recent append(long[] h, long[] t, int[] hour, int count) {
      if (count == 0) {
        return this;
      }
      byte[] out = new byte[(n + count) * ENTRY];
      System.arraycopy(b, off, out, 0, n * ENTRY);
      for (int k = 0; k < count; k++) {
        put(out, (n + k) * ENTRY, h[k], t[k], hour[k]);
      }
      return new Recent(out, 0, n + count);
    }

    private static void put(byte[] b, int at, long h, long t, int hour) {
      Codec.i64(b, at, h);
      Codec.i64(b, at + 8, t);
      Codec.i32(b, at + 16, hour);
    }

    void write(Codec.Out o) {
      o.i32(n).raw(b, off, n * ENTRY);
    }

    /** The tier at the reader's position; its bytes stay in (and are not copied from) the value. */
    static Recent read(Codec.In i) {
      int count = i.i32();
      if (count < 0 || count > Integer.MAX_VALUE / ENTRY) {
        throw new IllegalStateException("recent ids: bad count " + count);
      }
      int at = i.skip(count * ENTRY);
      return new Recent(i.array(), at, count);
    }
  }

  private final Older older;
  private final long windowMs;
  private final long horizonMs;
  private final int maxRecent;
  private final int maxPerHour;
  private final LongSet seen = new LongSet(); // recent ids and those of the loaded older hours
  private final Set<Long> loadedHours = new HashSet<>();
  // The ids first seen in this batch: hash, batch ms, hour.
  private long[] addedH = new long[16];
  private long[] addedT = new long[16];
  private int[] addedHour = new int[16];
  private int added;
  private boolean recentLoaded;
  private Recent recent = Recent.EMPTY;
  private TreeSet<Long> spilled = new TreeSet<>();
  private long forgotten;

  Dedup(Older older, long windowMs, long horizonMs, int maxRecent, int maxPerHour) {
    this.older = horizonMs > windowMs ? older : null;
    this.windowMs = windowMs;
    this.horizonMs = horizonMs;
    this.maxRecent = maxRecent;
    this.maxPerHour = maxPerHour;
  }

  /** The dedup of {@code policy}'s window, horizon and bounds. */
  Dedup(Older older, Policy policy) {
    this(older, policy.dedupWindowMs, policy.dedupHorizonMs, policy.dedupMaxRecentIds,
        policy.dedupMaxIdsPerHour);
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
    added = 0;
    forgotten = 0;
    recentLoaded = false; // read on the first id asked about: a timer or master data never does
  }

  /** Ids dropped by the bounds since {@link #begin}: their resends will not be duplicates. */
  long forgotten() {
    return forgotten;
  }

  /** Returns true (and remembers the id) unless {@code key} was seen within the horizon. */
  boolean firstTime(String key, Long deviceTimeMs, long nowMs) {
    if (!recentLoaded) {
      recentLoaded = true;
      int n = recent.size();
      seen.ensure(n);
      for (int k = 0; k < n; k++) {
        seen.add(recent.h(k));
      }
    }
    long h = hash(key);
    long t = Message.orZero(deviceTimeMs);
    long hour = Math.floorDiv(t, HOUR_MS);
    if (older != null && spilled.contains(hour) && loadedHours.add(hour)) {
      long[] ids = older.get(hour);
      if (ids.length > maxPerHour) { // filed before the bound was set or lowered
        ids = bounded(ids, new long[0]);
        older.put(hour, ids);
      }
      seen.ensure(ids.length);
      for (long id : ids) {
        seen.add(id);
      }
    }
    if (!seen.add(h)) {
      return false;
    }
    boolean near = Math.abs(t - nowMs) <= horizonMs;
    if (added == addedH.length) {
      addedH = Arrays.copyOf(addedH, added * 2);
      addedT = Arrays.copyOf(addedT, added * 2);
      addedHour = Arrays.copyOf(addedHour, added * 2);
    }
    addedH[added] = h;
    addedT[added] = nowMs;
    addedHour[added] = (int) (near ? hour : NO_HOUR);
    added++;
    return true;
  }

  /**
   * Returns the new recent tier, and moves ids past the window to the older tier (or forgets
   * them) once the oldest is a sixth of a window past it, or the oldest ones early once the
   * tier holds more than {@code maxRecent} ids; forgets older hours past the horizon. Returns
   * null when nothing changed.
   */
  Recent commit(long nowMs) {
    int n = recent.size();
    int total = n + added;
    boolean changed = added > 0;
    long cutoff = nowMs - windowMs;
    long min = Long.MAX_VALUE;
    for (int k = 0; k < n; k++) {
      min = Math.min(min, recent.t(k));
    }
    for (int k = 0; k < added; k++) {
      min = Math.min(min, addedT[k]);
    }
    boolean full = total > maxRecent;
    if (full || total > 0 && min <= cutoff - (long) (windowMs * SPILL_SLACK)) {
      long[] h = new long[total];
      long[] t = new long[total];
      int[] hr = new int[total];
      for (int k = 0; k < n; k++) {
        h[k] = recent.h(k);
        t[k] = recent.t(k);
        hr[k] = recent.hour(k);
      }
      System.arraycopy(addedH, 0, h, n, added);
      System.arraycopy(addedT, 0, t, n, added);
      System.arraycopy(addedHour, 0, hr, n, added);
      // Within the window, the newest (the tier is in first-seen order) up to the low mark.
      int within = 0;
      for (int k = 0; k < total; k++) {
        within += t[k] > cutoff ? 1 : 0;
      }
      int early = full ? Math.max(0, within - (maxRecent - maxRecent / 6)) : 0;
      int keep = 0;
      java.util.Map<Long, List<Long>> byHour = new java.util.TreeMap<>();
      for (int k = 0; k < total; k++) {
        boolean past = t[k] <= cutoff;
        if (!past && early > 0) {
          early--;
          past = true;
          forgotten += hr[k] == NO_HOUR || older == null ? 1 : 0; // no hour to be found by
        }
        if (past) {
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
      recent = Recent.of(h, t, hr, keep);
      changed = true;
    } else {
      recent = recent.append(addedH, addedT, addedHour, added);
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
    added = 0;
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
      long[] before = spilled.contains(e.getKey()) ? older.get(e.getKey()) : new long[0];
      long[] filed = e.getValue().stream().mapToLong(Long::longValue).toArray();
      older.put(e.getKey(), bounded(before, filed));
      spilled.add(e.getKey());
    }
  }

  /**
   * One older hour: its ids {@code before} then those filed now, in the order they were filed
   * (each spill in first-seen order), at most {@code maxPerHour}: past it the first filed,
   * the oldest, are forgotten.
   */
  private long[] bounded(long[] before, long[] filed) {
    LongSet known = new LongSet(before.length + filed.length);
    long[] ids = new long[before.length + filed.length];
    int n = 0;
    for (long[] part : new long[][] {before, filed}) {
      for (long id : part) {
        if (known.add(id)) {
          ids[n++] = id;
        }
      }
    }
    int drop = Math.max(0, n - maxPerHour);
    forgotten += drop;
    return Arrays.copyOfRange(ids, drop, n);
  }

  private static final ThreadLocal<MessageDigest> SHA256 = Digests.perThread("SHA-256");

  /** The 64-bit hash of an id (first 8 bytes of SHA-256). */
  static long hash(String key) {
    MessageDigest sha = SHA256.get();
    sha.reset(); // in case a digest was ever left half-fed
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
