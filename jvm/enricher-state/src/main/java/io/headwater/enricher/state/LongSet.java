package io.headwater.enricher.state;

import java.util.Arrays;

/**
 * A set of primitive longs (open addressing, linear probing): the dedup's ids of a device, with
 * no boxing and no entry objects. {@code clear} keeps the table for the next device.
 */
final class LongSet {
  private static final long EMPTY = 0L; // 0 itself is kept in hasZero
  private long[] table;
  private int mask;
  private int size;
  private boolean hasZero;

  LongSet() {
    this(16);
  }

  LongSet(int expected) {
    int cap = Integer.highestOneBit(Math.max(16, expected * 2 - 1)) << 1;
    table = new long[cap];
    mask = cap - 1;
  }

  int size() {
    return size + (hasZero ? 1 : 0);
  }

  /** Empties the set, keeping (or, once very large, shrinking) its table. */
  void clear() {
    if (table.length > 1 << 16) {
      table = new long[16];
      mask = 15;
    } else if (size > 0 || hasZero) {
      Arrays.fill(table, EMPTY);
    }
    size = 0;
    hasZero = false;
  }

  /** Makes room for {@code more} additions without growing on the way. */
  void ensure(int more) {
    long want = (long) size + more;
    if (want * 2 > table.length) {
      rehash((int) Math.min(1 << 30, Long.highestOneBit(want * 2 - 1) << 1));
    }
  }

  boolean contains(long v) {
    if (v == EMPTY) {
      return hasZero;
    }
    for (int i = slot(v); ; i = (i + 1) & mask) {
      long x = table[i];
      if (x == v) {
        return true;
      }
      if (x == EMPTY) {
        return false;
      }
    }
  }

  /** Adds {@code v}; returns false when it was there already (as {@code Set.add}). */
  boolean add(long v) {
    if (v == EMPTY) {
      if (hasZero) {
        return false;
      }
      hasZero = true;
      return true;
    }
    for (int i = slot(v); ; i = (i + 1) & mask) {
      long x = table[i];
      if (x == v) {
        return false;
      }
      if (x == EMPTY) {
        table[i] = v;
        if (++size * 2 > table.length) {
          rehash(table.length << 1);
        }
        return true;
      }
    }
  }

  private int slot(long v) {
    long h = v * 0x9E3779B97F4A7C15L;
    return (int) (h ^ (h >>> 32)) & mask;
  }

  private void rehash(int cap) {
    long[] old = table;
    table = new long[cap];
    mask = cap - 1;
    for (long x : old) {
      if (x != EMPTY) {
        int i = slot(x);
        while (table[i] != EMPTY) {
          i = (i + 1) & mask;
        }
        table[i] = x;
      }
    }
  }
}
