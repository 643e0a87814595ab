"""The enricher's Spark driver: command line, settings, job, runner, listeners.

``headwater enricher run`` (:mod:`.cli`) reads the settings (:mod:`.settings`), starts the
query (:mod:`.job`, the only module with ``readStream`` and ``writeStream``: the ingest
topics in, :mod:`headwater.enricher.sink` out) and runs it (:mod:`.runner`), with the
listeners (:mod:`.metrics`, :mod:`.progress_offsets`).
"""
