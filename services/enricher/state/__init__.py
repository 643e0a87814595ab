"""The per-device keyed state: the Java operator (``jvm/enricher-state``) and its policy.

:mod:`.jvm_state` is the only module that touches py4j; :mod:`.policy` is what the operator
is given (topics, retries, dedup and snapshot bounds), as ``key=value`` lines.
"""
