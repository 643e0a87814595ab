"""``headwater bench faults``: broker faults at the issue's rate, through the gateway library.

A three-node KRaft cluster on loopback (RF 3, ``min.insync.replicas=2``), a real ingest
server in its own process, and a steady load spooled through the gateway library
(:mod:`load`), then two faults in turn: the leader of the ingest partitions SIGKILLed
(:mod:`leader_kill`) and a rolling restart of every node (:mod:`rolling`). Every
acknowledged message is read back from Kafka (:mod:`readback`); the figures and the targets
of issue 36 are in :mod:`report`.
"""
