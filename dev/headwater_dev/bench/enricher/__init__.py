"""The enricher's benchmarks (dev tooling: no production module imports them).

``python -m headwater_dev.bench.enricher`` (or ``headwater bench enricher``) runs :mod:`.query`;
:mod:`.hop` and :mod:`.normalize` measure the Python hop's work per message without Spark.
"""
