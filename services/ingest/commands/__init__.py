"""Commands to devices on the ingest side (docs/commands.md).

- ``settings``: what the command parts of an ingest replica read from the environment;
- ``book``: the commands waiting for delivery, in memory, per device and in order;
- ``feed``: keeps the book up to date from commands.v1 and command-status.v1, and the
  leases from command-owners.v1;
- ``leases``, ``owners``: which gateway owns a device's commands, agreed by every replica
  through a lease per device on command-owners.v1;
- ``relay``: turns gateways' reports (ingest.command-status.v1) into CommandStatus
  records on command-status.v1;
- ``delivery``: the ReceiveCommands RPC;
- ``service``: wires them together for one ingest server.
"""
