"""The enricher's Spark driver side: command line, job, settings, sink, listeners.

``headwater enricher run`` (:mod:`.cli`) reads the settings (:mod:`.settings`), starts the
query (:mod:`.job`, the only module with ``readStream`` and ``writeStream``) and runs it
(:mod:`.runner`); the JVM state operator is called through py4j here (:mod:`.jvm_state`).
The "headwater-kafka" sink (:mod:`.kafka_sink`) is registered and committed here; its
writers run in the Python workers.
"""
