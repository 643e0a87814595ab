"""The spool file's tables (SQLite); created on open, so older files gain new indexes.

- ``outbox``: messages waiting for their OK, in enqueue order (``seq``), with the attempts
  so far and the time before which they must not be resent;
- ``device_sequence``: the last sequence number given to each device (it must survive the
  outbox emptying, or numbers would restart);
- ``rejected``: messages the service refused for good, with code, reason and explanation;
- ``counters``: what happened, all time (delivered, retried, rejected, dropped_oldest,
  expired, refused);
- ``commands``: commands received from the cloud, in arrival order (``seq``), one row per
  (device, command id) so a command delivered twice is kept and run once; ``done`` once
  its final state is spooled for sending (docs/commands.md).
"""

SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id TEXT NOT NULL UNIQUE,
    endpoint TEXT NOT NULL,
    envelope BLOB NOT NULL,
    enqueued_ms INTEGER NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    not_before_ms INTEGER NOT NULL DEFAULT 0
);
-- The sender walks an endpoint's messages in order (skipping the few not yet due);
-- an index led by not_before_ms would make every frame sort the whole backlog.
CREATE INDEX IF NOT EXISTS outbox_order ON outbox (endpoint, seq);
-- Messages waiting for a retry are found without walking the rest.
CREATE INDEX IF NOT EXISTS outbox_retried ON outbox (endpoint, seq) WHERE attempts > 0;
CREATE INDEX IF NOT EXISTS outbox_due ON outbox (endpoint, not_before_ms);
CREATE INDEX IF NOT EXISTS outbox_age ON outbox (enqueued_ms);
CREATE TABLE IF NOT EXISTS device_sequence (
    device_id TEXT PRIMARY KEY,
    last INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS rejected (
    message_id TEXT PRIMARY KEY,
    endpoint TEXT NOT NULL,
    envelope BLOB NOT NULL,
    code TEXT NOT NULL,
    reason TEXT NOT NULL,
    detail TEXT NOT NULL,
    rejected_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS commands (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    device_id TEXT NOT NULL,
    command_id TEXT NOT NULL,
    envelope BLOB NOT NULL,
    received_ms INTEGER NOT NULL,
    done INTEGER NOT NULL DEFAULT 0,
    UNIQUE (device_id, command_id)
);
CREATE INDEX IF NOT EXISTS commands_waiting ON commands (seq) WHERE done = 0;
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"""
