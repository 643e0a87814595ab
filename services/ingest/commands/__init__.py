"""Commands to devices on the ingest side (docs/commands.md).

- ``settings``: what the command parts of an ingest replica read from the environment;
- ``book``: the commands waiting for delivery, in memory, per device and in order;
- ``feed``: keeps the book up to date from commands.v1 and command-status.v1;
- ``relay``: turns gateways' reports (ingest.command-status.v1) into CommandStatus
  records on command-status.v1;
- ``delivery``: the ReceiveCommands RPC;
- ``service``: wires them together for one ingest server.
"""
