"""Kafka plumbing shared by every process: client settings, topic admin, diagnosis, reading.

``settings`` turns the ``HEADWATER_KAFKA_*`` variables into librdkafka, aiokafka and Java
client configurations; ``admin`` creates topics; ``diagnose`` names the setting to fix when
a broker refuses us; ``read`` reads a topic to its end without joining a group.
"""
