"""The enricher: a Spark Structured Streaming job from ingest topics to enriched events.

Entry points: ``headwater enricher run`` (:mod:`headwater.enricher.cli`), the job
(:mod:`headwater.enricher.job`) and its settings (:mod:`headwater.enricher.settings`).
Nothing is imported here so that ``headwater --help`` does not load Spark.
"""
