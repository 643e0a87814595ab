"""The Kafka writers behind one protocol: librdkafka (the default) and aiokafka.

``protocol`` (``RecordWriter``, ``Headers``), ``confluent_writer``, ``aiokafka_writer``;
each reports failures as the neutral ``produce_errors``.
"""
