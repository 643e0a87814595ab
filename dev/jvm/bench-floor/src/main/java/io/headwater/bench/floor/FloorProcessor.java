package io.headwater.bench.floor;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The benchmark's JVM floor (dev/headwater_dev/bench/enricher/query.py): the enricher's keyed
 * operator with none of the enricher's work. One value read and written per device and batch (a count), one
 * completion-shaped record per ingest row with its headers, so the benchmark's watch sees it.
 * Reads the raw keyed rows (keys.key_columns), no Python hop in front.
 */
public final class FloorProcessor extends StatefulProcessor<Row, Row, Row> {
  private static final long serialVersionUID = 1L;
  private final String completions;
  private final String masterTopic;
  private transient ValueState<byte[]> count;

  FloorProcessor(String completions, String masterTopic) {
    this.completions = completions;
    this.masterTopic = masterTopic;
  }

  @Override
  public void init(OutputMode outputMode, TimeMode timeMode) {
    count = getHandle().getValueState("count", Encoders.BINARY(), TTLConfig.NONE());
  }

  @Override
  public Iterator<Row> handleInputRows(Row key, Iterator<Row> rows, TimerValues timers) {
    long now = timers.getCurrentProcessingTimeInMs();
    long n = count.exists() ? ByteBuffer.wrap(count.get()).getLong() : 0;
    List<Row> out = new ArrayList<>();
    while (rows.hasNext()) {
      Row r = rows.next();
      String topic = r.getString(r.fieldIndex("src_topic"));
      if (topic.equals(masterTopic)) {
        continue;
      }
      n++;
      String ref = topic + "/" + r.getInt(r.fieldIndex("src_partition")) + "/"
          + r.getLong(r.fieldIndex("src_offset"));
      String device = r.getString(r.fieldIndex("device_key"));
      out.add(RowFactory.create(completions, device.getBytes(java.nio.charset.StandardCharsets.UTF_8),
          new byte[0], r.get(r.fieldIndex("headers")), "completion", "FLOOR", ref, null, null,
          now));
    }
    count.update(ByteBuffer.allocate(8).putLong(n).array());
    return CollectionConverters.asScala(out.iterator());
  }
}
