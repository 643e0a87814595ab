package io.headwater.enricher.state;

import java.io.IOException;
import java.io.Serializable;
import java.io.StringReader;
import java.io.UncheckedIOException;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;

/**
 * How the operator behaves: the enricher's settings (policy.py's Policy) plus the bounds the JVM
 * operator adds. Given by Python as {@code key=value} lines (jvm_state.py), so py4j passes one
 * string and no Python object crosses into the JVM.
 */
final class Policy implements Serializable {
  private static final long serialVersionUID = 1L;

  /** 32 MiB: with the retry's copies, well under 256 MB of heap per device (docs/enricher.md). */
  static final long DEFAULT_MAX_PARKED_BYTES = 32L << 20;
  /** 50,000 ids of 20 bytes: 1 MB in the device value; 11.9 ids/s for 70 min (docs/enricher.md). */
  static final int DEFAULT_DEDUP_MAX_RECENT_IDS = 50_000;
  /** 50,000 ids of 8 bytes: 400 KB per hour; 13.9 ids/s for a whole hour of device time. */
  static final int DEFAULT_DEDUP_MAX_IDS_PER_HOUR = 50_000;

  final String completions;
  final String deadletter;
  final String retry;
  final String state;
  /** Event type ("telemetry", "alarm") -> its topic. */
  final Map<String, String> eventTopics = new HashMap<>();
  final int maxAttempts;
  final long backoffMs;
  final long backoffMaxMs;
  final long dedupWindowMs;
  final long dedupHorizonMs;
  /**
   * The most ids the recent dedup tier keeps in the device value (read and written every batch
   * of the device): past it the oldest move to the older tier early (Dedup).
   */
  final int dedupMaxRecentIds;
  /** The most ids one device-time hour of the older tier keeps: past it the oldest go. */
  final int dedupMaxIdsPerHour;
  final int maxLatestValues;
  /** The most input rows of one device held (and sorted) at once; a backlog goes in chunks. */
  final int maxRowsPerChunk;
  /** The most original bytes of one device held at once (with maxRowsPerChunk). */
  final long maxChunkBytes;
  /** Sparkplug definitions kept per device: metrics, and their bytes (names, units). */
  final int maxDefinitions;
  final long maxDefinitionBytes;
  /** An event larger than this (estimated before it is built) is a dead letter. */
  final long maxEventBytes;
  /**
   * The most messages one device keeps parked (waiting for master data): every retry reads
   * them all, and a device without master data must not grow its state without bound. A
   * message over it is a dead letter (PARKED_LIMIT) and can be redriven once master data is in.
   */
  final int maxParked;
  /**
   * The most encoded bytes one device keeps parked: a retry holds them (decoded and re-encoded)
   * in the worker's heap, so the count alone does not bound memory (10,000 x 240 KB messages
   * is 2.4 GB). A message that would pass it is a dead letter (PARKED_BYTES_LIMIT).
   */
  final long maxParkedBytes;

  private Policy(Properties p) {
    completions = need(p, "topic.completions");
    deadletter = need(p, "topic.deadletter");
    retry = need(p, "topic.retry");
    state = need(p, "topic.state");
    for (String name : p.stringPropertyNames()) {
      if (name.startsWith("topic.event.")) {
        eventTopics.put(name.substring("topic.event.".length()), p.getProperty(name));
      }
    }
    maxAttempts = Integer.parseInt(need(p, "max_attempts"));
    backoffMs = Long.parseLong(need(p, "backoff_ms"));
    backoffMaxMs = Long.parseLong(need(p, "backoff_max_ms"));
    dedupWindowMs = Long.parseLong(need(p, "dedup_window_ms"));
    dedupHorizonMs = Long.parseLong(need(p, "dedup_horizon_ms"));
    dedupMaxRecentIds = Integer.parseInt(
        p.getProperty("dedup_max_recent_ids", String.valueOf(DEFAULT_DEDUP_MAX_RECENT_IDS)));
    dedupMaxIdsPerHour = Integer.parseInt(
        p.getProperty("dedup_max_ids_per_hour", String.valueOf(DEFAULT_DEDUP_MAX_IDS_PER_HOUR)));
    maxLatestValues = Integer.parseInt(p.getProperty("max_latest_values", "100"));
    maxRowsPerChunk = Integer.parseInt(p.getProperty("max_rows_per_chunk", "10000"));
    maxChunkBytes = Long.parseLong(p.getProperty("max_chunk_bytes", String.valueOf(64L << 20)));
    maxDefinitions = Integer.parseInt(p.getProperty("max_definitions", "10000"));
    maxDefinitionBytes = Long.parseLong(p.getProperty("max_definition_bytes", "1048576"));
    maxEventBytes = Long.parseLong(p.getProperty("max_event_bytes", "1000000"));
    maxParked = Integer.parseInt(p.getProperty("max_parked", "10000"));
    maxParkedBytes =
        Long.parseLong(p.getProperty("max_parked_bytes", String.valueOf(DEFAULT_MAX_PARKED_BYTES)));
  }

  /** Returns the policy of {@code key=value} lines (java.util.Properties syntax). */
  static Policy parse(String text) {
    Properties p = new Properties();
    try {
      p.load(new StringReader(text));
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return new Policy(p);
  }

  /** Returns when attempt {@code attempt + 1} may run: exponential backoff, capped. */
  long notBefore(long nowMs, int attempt) {
    int shift = Math.min(Math.max(attempt - 1, 0), 40); // 2^40 x any backoff is past any cap
    return nowMs + Math.min(backoffMs << shift, backoffMaxMs);
  }

  String eventTopic(String eventType) {
    String topic = eventTopics.get(eventType);
    if (topic == null) {
      throw new IllegalArgumentException("no topic for event type '" + eventType + "'");
    }
    return topic;
  }

  private static String need(Properties p, String key) {
    String v = p.getProperty(key);
    if (v == null) {
      throw new IllegalArgumentException("policy has no " + key);
    }
    return v;
  }
}
