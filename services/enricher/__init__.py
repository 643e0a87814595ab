"""The enricher: a Spark Structured Streaming job from ingest topics to enriched events.

Laid out along the path a record takes:

- :mod:`headwater.enricher.source`: the keyed state's key of the ingest and master-data
  records, in Spark SQL evaluated by the JVM (``keys``).
- :mod:`headwater.enricher.hop`: the Python that Spark's Python workers run over Arrow
  batches: decode, normalize (vendor ``formats``, units, media types, the per-message
  budget) in one hop, and the column layouts (``schema``).
- :mod:`headwater.enricher.state`: the per-device keyed state, the Java operator in
  ``jvm/enricher-state`` called through py4j (``jvm_state``, the only py4j room), and the
  ``policy`` it is given.
- :mod:`headwater.enricher.sink`: the "headwater-kafka" sink; its writers run in the Python
  workers, records the producer refuses become dead letters (``unproducible``).
- :mod:`headwater.enricher.driver`: the Spark driver: the command line
  (``headwater enricher run``, :mod:`~headwater.enricher.driver.cli`), settings, the job
  (:mod:`~headwater.enricher.driver.job`, which opens the Kafka source and the sink) and its
  runner, the listeners (metrics, progress offsets).
- Beside the rooms, what they share: :mod:`headwater.enricher.errors` (one root, raised in
  every room) and :mod:`headwater.enricher.topics` (the topic set the settings name and the
  state's policy carries).
- :mod:`headwater.enricher.plugins`: the public API of vendor-format plugins.

Nothing is imported here so that ``headwater --help`` does not load Spark.
"""
