package io.headwater.enricher.state;

import java.time.Duration;
import java.util.List;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.streaming.ExpiredTimerInfo;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.util.LongAccumulator;
import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The Spark side of the keyed state: declares the state variables, and hands each device's rows
 * or timer to {@link DeviceLogic}. Keyed by (tenant, device key): device ids and message ids are
 * unique per tenant only.
 */
public final class DeviceProcessor extends StatefulProcessor<Row, Row, Row> {
  private static final long serialVersionUID = 1L;
  private final Policy policy;
  /** Dedup ids forgotten by the bounds, all devices ({@link EnricherState#idsForgotten}). */
  private final LongAccumulator idsForgotten;
  private transient SparkDeviceStore store;
  private transient Records records;
  private transient MessageReader reader;

  DeviceProcessor(Policy policy, LongAccumulator idsForgotten) {
    this.policy = policy;
    this.idsForgotten = idsForgotten;
  }

  @Override
  public void init(OutputMode outputMode, TimeMode timeMode) {
    var h = getHandle();
    var device = h.getValueState("device", Encoders.BINARY(), TTLConfig.NONE());
    var parked = h.<Long, byte[]>getMapState("parked_slots", Encoders.LONG(), Encoders.BINARY(),
        TTLConfig.NONE());
    // The parked list of the layout before slots: still read, once, to move what it holds.
    var parkedList = h.getListState("parked", Encoders.BINARY(), TTLConfig.NONE());
    // Older ids expire with the horizon (plus an hour), even for a device that went silent.
    var ttl = TTLConfig.apply(Duration.ofMillis(policy.dedupHorizonMs + Dedup.HOUR_MS));
    var older = h.<Long, byte[]>getMapState("older_ids", Encoders.LONG(), Encoders.BINARY(), ttl);
    var births = h.getValueState("births", Encoders.BINARY(), TTLConfig.NONE());
    store = new SparkDeviceStore(h, device, parked, parkedList, older, births);
    records = new Records(policy);
    reader = new MessageReader();
  }

  @Override
  public Iterator<Row> handleInputRows(Row key, Iterator<Row> rows, TimerValues timers) {
    DeviceLogic logic = logic(key, timers);
    List<Row> out = logic.batch(CollectionConverters.asJava(rows), reader::read);
    idsForgotten.add(logic.dedupIdsForgotten());
    return wrap(out);
  }

  @Override
  public Iterator<Row> handleExpiredTimer(Row key, TimerValues timers, ExpiredTimerInfo info) {
    DeviceLogic logic = logic(key, timers);
    List<Row> out = logic.timer();
    idsForgotten.add(logic.dedupIdsForgotten());
    return wrap(out);
  }

  private DeviceLogic logic(Row key, TimerValues timers) {
    String tenant = key.isNullAt(0) ? "" : key.getString(0);
    String device = key.isNullAt(1) ? "" : key.getString(1);
    return new DeviceLogic(policy, records, store, tenant, device,
        timers.getCurrentProcessingTimeInMs());
  }

  private static Iterator<Row> wrap(List<Row> rows) {
    return CollectionConverters.asScala(rows.iterator());
  }
}
