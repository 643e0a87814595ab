"""The "headwater-kafka" sink: output records to Kafka, events before their completions.

Registered and committed on the driver, its writers run in the Python workers
(:mod:`.kafka_sink`); records the producer refuses become dead letters (:mod:`.unproducible`).
"""
