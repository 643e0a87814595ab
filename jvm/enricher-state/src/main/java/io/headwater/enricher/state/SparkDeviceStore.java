package io.headwater.enricher.state;

import java.util.Iterator;
import java.util.List;
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
  private final ListState<byte[]> parked;
  private final MapState<Long, byte[]> older;
  private final ValueState<byte[]> definitions;

  SparkDeviceStore(StatefulProcessorHandle handle, ValueState<byte[]> device,
      ListState<byte[]> parked, MapState<Long, byte[]> older, ValueState<byte[]> definitions) {
    this.handle = handle;
    this.device = device;
    this.parked = parked;
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
  public Iterator<byte[]> parked() {
    return CollectionConverters.asJava(parked.get());
  }

  @Override
  public void parked(List<byte[]> entries) {
    if (entries.isEmpty()) {
      parked.clear();
    } else {
      parked.put(entries.toArray(new byte[0][]));
    }
  }

  @Override
  public void appendParked(byte[] entry) {
    parked.appendValue(entry);
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
