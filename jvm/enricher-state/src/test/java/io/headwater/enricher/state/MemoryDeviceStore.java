package io.headwater.enricher.state;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;

/** One device's state in memory, counting state calls (the Spark store makes the same calls). */
final class MemoryDeviceStore implements DeviceStore {
  byte[] device;
  /** The parked entries by slot. */
  final TreeMap<Long, byte[]> parked = new TreeMap<>();
  /** The parked list of the layout before slots. */
  List<byte[]> parkedList = new ArrayList<>();
  final Map<Long, long[]> older = new HashMap<>();
  byte[] definitions;
  final TreeSet<Long> timers = new TreeSet<>();
  int parkedReads;
  int parkedWrites;
  int parkedRemoves;
  int parkedListReads;

  @Override
  public byte[] device() {
    return device;
  }

  @Override
  public void device(byte[] value) {
    device = value;
  }

  @Override
  public byte[] parked(long slot) {
    parkedReads++;
    return parked.get(slot);
  }

  @Override
  public void park(long slot, byte[] entry) {
    parkedWrites++;
    parked.put(slot, entry);
  }

  @Override
  public void unpark(long slot) {
    parkedRemoves++;
    parked.remove(slot);
  }

  @Override
  public Iterator<byte[]> parkedList() {
    parkedListReads++;
    return new ArrayList<>(parkedList).iterator();
  }

  @Override
  public void clearParkedList() {
    parkedList = new ArrayList<>();
  }

  @Override
  public byte[] definitions() {
    return definitions;
  }

  @Override
  public void definitions(byte[] value) {
    definitions = value;
  }

  @Override
  public void registerTimer(long atMs) {
    timers.add(atMs);
  }

  @Override
  public long[] get(long hour) {
    return older.getOrDefault(hour, new long[0]);
  }

  @Override
  public void put(long hour, long[] ids) {
    older.put(hour, ids);
  }

  @Override
  public void remove(long hour) {
    older.remove(hour);
  }
}
