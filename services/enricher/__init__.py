"""The enricher: a Spark Structured Streaming job from ingest topics to enriched events.

Laid out by where the code runs:

- :mod:`headwater.enricher.driver`: the Spark driver's side: the command line
  (``headwater enricher run``, :mod:`~headwater.enricher.driver.cli`), the job
  (:mod:`~headwater.enricher.driver.job`), its settings, the py4j call of the JVM state
  operator (``jvm/enricher-state``), the Kafka sink, the listeners (metrics, progress offsets).
- :mod:`headwater.enricher.executor`: the Python that Spark's Python workers run over Arrow
  batches: decode, normalize (vendor ``formats``, units, the per-message budget).

``headwater.enricher.formats`` and ``headwater.enricher.normalize`` stay importable for
normalizer plugins. Nothing is imported here so that ``headwater --help`` does not load Spark.
"""
