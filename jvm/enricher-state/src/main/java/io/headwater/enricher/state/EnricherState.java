package io.headwater.enricher.state;

import org.apache.spark.SparkContext;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.LongAccumulator;

/**
 * The entry point PySpark calls through py4j (services/enricher/state/jvm_state.py): the decoded,
 * normalized rows of the Python hop in, the output records (schema.py's OUTPUT) out.
 */
public final class EnricherState {
  /**
   * The accumulator of the dedup ids the bounds forgot: the driver exports it as a Prometheus
   * counter (metrics.py); the Spark UI shows it among the stage's accumulators.
   */
  static final String IDS_FORGOTTEN = "headwater.enricher.dedup.ids_forgotten";
  /** The one accumulator of {@link #IDS_FORGOTTEN} in {@link #context}, shared by its queries. */
  private static LongAccumulator idsForgotten;
  private static SparkContext context;
  private static final StructType KEY = StructType.fromDDL("tenant string, device_key string");

  private EnricherState() {}

  /**
   * Returns {@code decoded} run through the per-device keyed state.
   *
   * @param decoded rows with schema.py's DECODED_FIELDS, NORMALIZED_FIELDS, SOURCE_FIELDS and
   *     {@code units}
   * @param policy the settings as {@code key=value} lines (see {@link Policy})
   */
  public static Dataset<Row> apply(Dataset<Row> decoded, String policy) {
    Policy p = Policy.parse(policy); // parsed here, so a bad policy fails on the driver
    LongAccumulator forgotten = idsForgotten(decoded.sparkSession().sparkContext());
    return decoded
        .groupBy(decoded.col("tenant"), decoded.col("device_key"))
        .as(Encoders.row(KEY), Encoders.row(decoded.schema()))
        .transformWithState(new DeviceProcessor(p, forgotten), TimeMode.ProcessingTime(), OutputMode.Append(),
            Encoders.row(Records.OUTPUT));
  }

  /**
   * Returns the accumulator of the dedup ids the bounds forgot in {@code sc}'s queries, registered
   * on first use. One per Spark context, so the driver (metrics.py, read after each micro-batch)
   * finds the one its query's tasks add to without a handle threaded through the query's making;
   * a new context (after a stop) gets a new one, as the old context's registry is gone.
   */
  public static synchronized LongAccumulator idsForgotten(SparkContext sc) {
    if (context != sc) {
      idsForgotten = sc.longAccumulator(IDS_FORGOTTEN);
      context = sc;
    }
    return idsForgotten;
  }

  /** The output layout, for Python to check against schema.OUTPUT. */
  public static String outputDdl() {
    return Records.OUTPUT.toDDL();
  }
}
