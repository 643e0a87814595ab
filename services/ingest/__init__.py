"""The gRPC ingest service, in rooms along the path one request takes.

``rpc`` (the server and the RPCs) -> ``admission`` (who calls, and whether there is room)
-> ``write`` (each message checked and issued in its gateway's order) -> ``writers`` (the
Kafka clients). At the top: the service's face (``cli``, ``settings``, ``errors`` and
``status``, the one place errors become gRPC codes, ``metrics``, ``event_loop``);
``commands`` serves the other direction, commands to devices.
"""
