"""Benchmarks that print numbers and ratios against ceilings measured in the same run.

Dev tooling: ``headwater bench ingest|gateway|gateway-connectors|commands|enricher``
(``cli``). No production module imports this package (tests/test_layout.py).
"""
