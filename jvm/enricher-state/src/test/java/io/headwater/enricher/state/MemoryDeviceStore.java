package io.headwater.enricher.state;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;

/** One device's state in memory, counting state calls (the Spark store makes the same calls). */
final class MemoryDeviceStore implements DeviceStore {
  byte[] device;
  List<byte[]> parked = new ArrayList<>();
  final Map<Long, long[]> older = new HashMap<>();
  byte[] definitions;
  final TreeSet<Long> timers = new TreeSet<>();
  int parkedWrites;
  int parkedAppends;

  @Override
  public byte[] device() {
    return device;
  }

  @Override
  public void device(byte[] value) {
    device = value;
  }

  @Override
  public Iterator<byte[]> parked() {
    return new ArrayList<>(parked).iterator();
  }

  @Override
  public void parked(List<byte[]> entries) {
    parkedWrites++;
    parked = new ArrayList<>(entries);
  }

  @Override
  public void appendParked(byte[] entry) {
    parkedAppends++;
    parked.add(entry);
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
