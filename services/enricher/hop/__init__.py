"""The Python that Spark's Python workers run over Arrow batches: decode and normalize.

Stateless, per message: the envelope decoded (:mod:`.decode`), the vendor payload normalized
(:mod:`.normalize`, :mod:`.formats`, :mod:`.units`, under :mod:`.budget`), in one Arrow
UDF over batches (:mod:`.arrow_hop`) before the JVM keyed state. Functions sent to the
workers are pickled by module path, so they are imported from here there too.
"""
