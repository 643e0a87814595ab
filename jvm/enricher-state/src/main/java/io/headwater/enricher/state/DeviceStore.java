package io.headwater.enricher.state;

import java.util.Iterator;

/**
 * The state of the current device, as {@link DeviceLogic} needs it. {@link SparkDeviceStore}
 * keeps it in Spark's state variables (RocksDB); the tests use an in-memory one, so the logic
 * is tested without a Spark session and the Spark adapter stays a few lines.
 *
 * <p>Parked messages are kept one per slot (a map from slot number to entry; the device value
 * says which slots are in use), so a retry reads, rewrites or removes one entry at a time.
 */
interface DeviceStore extends Dedup.Older {
  byte[] device();

  void device(byte[] value);

  /** The parked entry in {@code slot}, or null if there is none (one point read). */
  byte[] parked(long slot);

  /** Writes the parked entry of {@code slot}: a new one, or one parked again in place. */
  void park(long slot, byte[] entry);

  void unpark(long slot);

  /**
   * The parked entries of the layout before slots (one list, which Spark reads whole), in the
   * order they were written: read once per device, when they move into slots.
   */
  Iterator<byte[]> parkedList();

  void clearParkedList();

  byte[] definitions();

  void definitions(byte[] value);

  void registerTimer(long atMs);
}
