"""Master data of devices, and the tools that keep it.

Records are ``headwater.proto.master.v1.DeviceMaster`` in the compacted topic
``master.devices.v1``, keyed ``<tenant>/<device_id>``.

:mod:`headwater.master.records` reads and validates master-data files (CSV, JSON, YAML),
:mod:`headwater.master.store` reads the topic's current records and writes changes, and
:mod:`headwater.master.cli` is ``headwater master``. The dev stack writes its master data
with :func:`headwater.master.store.write_records` too.
"""
