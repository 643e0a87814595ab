package io.headwater.bench.floor;

import io.headwater.enricher.state.EnricherState;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.types.StructType;

/**
 * The entry point the enricher benchmark calls through py4j (headwater_dev.bench.enricher.floor):
 * the enricher's keyed operator with no enricher work, writing the operator's output layout.
 */
public final class Floor {
  private static final StructType KEY = StructType.fromDDL("tenant string, device_key string");

  private Floor() {}

  /**
   * Returns the JVM floor over raw keyed rows (keys.key_columns, with or without the hop's
   * columns): one {@link FloorProcessor} per (tenant, device).
   */
  public static Dataset<Row> apply(Dataset<Row> keyed, String completions, String masterTopic) {
    StructType output = StructType.fromDDL(EnricherState.outputDdl());
    return keyed
        .groupBy(keyed.col("tenant"), keyed.col("device_key"))
        .as(Encoders.row(KEY), Encoders.row(keyed.schema()))
        .transformWithState(new FloorProcessor(completions, masterTopic),
            TimeMode.ProcessingTime(), OutputMode.Append(), Encoders.row(output));
  }
}
