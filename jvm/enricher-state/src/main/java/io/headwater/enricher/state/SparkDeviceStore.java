package io.headwater.enricher.state;

import java.util.Iterator;
import org.apache.spark.sql.streaming.ListState;
import org.apache.spark.sql.streaming.MapState;
import org.apache.spark.sql.streaming.StatefulProcessorHandle;
import org.apache.spark.sql.streaming.ValueState;
import scala.jdk.javaapi.CollectionConverters;

/**
 * {@link DeviceStore} over the processor's state variables (for the current grouping key).
 *
 * <p>Reads are one state-store lookup each: Spark's {@code ValueState.get} and {@code
 * MapState.getValue} return null for what is absent, so asking {@code exists} or {@code
 * containsKey} first would look the key up twice.
 */
final class SparkDeviceStore implements DeviceStore {
  private final StatefulProcessorHandle handle;
  private final ValueState<byte[]> device;
  private final MapState<Long, byte[]> parked;
  private final ListState<byte[]> parkedList;
  private final MapState<Long, byte[]> older;
  private final ValueState<byte[]> definitions;

  SparkDeviceStore(StatefulProcessorHandle handle, ValueState<byte[]> device,
      MapState<Long, byte[]> parked, ListState<byte[]> parkedList, MapState<Long, byte[]> older,
      ValueState<byte[]> definitions) {
    this.handle = handle;
    this.device = device;
    this.parked = parked;
    this.parkedList = parkedList;
    this.older = older;
    this.definitions = definitions;
  }

  @Override
  public byte[] device() {
    return device.get();
  }

  @Override
  public void device(byte[] value) {
    device.update(value);
  }

  @Override
  public byte[] parked(long slot) {
    return parked.getValue(slot);
  }

  @Override
  public void park(long slot, byte[] entry) {
    parked.updateValue(slot, entry);
  }

  @Override
  public void unpark(long slot) {
    parked.removeKey(slot);
  }

  @Override
  public Iterator<byte[]> parkedList() {
    return CollectionConverters.asJava(parkedList.get());
  }

  @Override
  public void clearParkedList() {
    parkedList.clear();
  }

  @Override
  public byte[] definitions() {
    return definitions.get();
  }

  @Override
  public void definitions(byte[] value) {
    definitions.update(value);
  }

  @Override
  public void registerTimer(long atMs) {
    handle.registerTimer(atMs);
  }

  @Override
  public long[] get(long hour) {
    byte[] v = older.getValue(hour);
    if (v == null) {
      return new long[0];
    }
    java.nio.LongBuffer b = java.nio.ByteBuffer.wrap(v).asLongBuffer();
    long[] ids = new long[b.remaining()];
    b.get(ids);
    return ids;
  }

  @Override
  public void put(long hour, long[] ids) {
    java.nio.ByteBuffer b = java.nio.ByteBuffer.allocate(ids.length * 8);
    b.asLongBuffer().put(ids);
    older.updateValue(hour, b.array());
  }

  @Override
  public void remove(long hour) {
    older.removeKey(hour);
  }
}
