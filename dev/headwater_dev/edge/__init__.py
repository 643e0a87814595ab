"""The edge on loopback: Mosquitto, an OPC UA server, a Modbus device, a gateway's health.

The connector tests, ``headwater bench gateway-connectors`` and the dev stack run
``headwater gateway run`` against these real brokers and servers.
"""
