"""Connectors: MQTT (Sparkplug B and JSON), OPC UA and Modbus TCP sources feeding the spool."""
