"""``headwater bench gateway-connectors``: the ready gateway's connectors on one pinned core.

``run`` drives the benchmark, ``loads`` one load per connector (MQTT, OPC UA, Modbus),
``pinned_gateway`` the gateway process under ``taskset``, ``report`` the targets of issue 39.
"""
