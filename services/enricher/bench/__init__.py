"""The enricher's benchmarks (dev tooling: no production module imports them).

``python -m headwater.enricher.bench`` (or ``headwater bench enricher``) runs :mod:`.query`;
:mod:`.hop` and :mod:`.python_operator` measure the Python work per message without Spark.
"""
