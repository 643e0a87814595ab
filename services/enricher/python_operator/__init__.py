"""The per-device keyed state in Python (``HEADWATER_ENRICHER_STATE_OPERATOR=python``).

PySpark's row-based ``transformWithState`` (:mod:`.state`): dedupe, master data, Sparkplug B
births, enrich, route, parked retries and the device snapshot. The JVM operator
(``jvm/enricher-state``) is the default; this one is kept selectable for the difference test
and the benchmarks until it is removed.
"""
