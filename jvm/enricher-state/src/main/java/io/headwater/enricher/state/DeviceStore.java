package io.headwater.enricher.state;

import java.util.Iterator;
import java.util.List;

/**
 * The state of the current device, as {@link DeviceLogic} needs it. {@link SparkDeviceStore}
 * keeps it in Spark's state variables (RocksDB); the tests use an in-memory one, so the logic
 * is tested without a Spark session and the Spark adapter stays a few lines.
 */
interface DeviceStore extends Dedup.Older {
  byte[] device();

  void device(byte[] value);

  /** The parked entries, in the order they were written, one at a time (never as a list). */
  Iterator<byte[]> parked();

  /** Replaces the parked entries with {@code entries} (one state call; empty clears). */
  void parked(List<byte[]> entries);

  void appendParked(byte[] entry);

  byte[] definitions();

  void definitions(byte[] value);

  void registerTimer(long atMs);
}
