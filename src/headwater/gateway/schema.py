"""The spool file's tables (SQLite); created on open, so older files gain new indexes.

- ``outbox``: messages waiting for their OK, in enqueue order (``seq``), with the attempts
  so far and the time before which they must not be resent;
- ``device_sequence``: the last sequence number given to each device (it must survive the
  outbox emptying, or numbers would restart);
- ``rejected``: messages the service refused for good, with code, reason and explanation;
- ``counters``: what happened, all time (delivered, retried, rejected, dropped_oldest,
  expired, refused);
- ``commands``: commands received from the cloud, in arrival order (``seq``), one row per
  (device, command id) so a command delivered twice is kept and run once; ``started_ms``
  written (durably) before its handler is called, ``done`` and ``finished_ms`` once its
  final state is spooled for sending (docs/commands.md); ``command_bytes``: their total
  size, kept by triggers (it counts in the spool's byte limit).

Columns added after a table was first released are in ``ADDED_COLUMNS``: :func:`upgrade`
adds them to older files.
"""

import sqlite3

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
    started_ms INTEGER,
    finished_ms INTEGER,
    UNIQUE (device_id, command_id)
);
CREATE INDEX IF NOT EXISTS commands_waiting ON commands (seq) WHERE done = 0;
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"""

#: (table, column, declaration) of columns newer than their table.
ADDED_COLUMNS = (
    ("commands", "started_ms", "INTEGER"),
    ("commands", "finished_ms", "INTEGER"),
)
#: What needs the added columns. Done commands are deleted by age (the retention), found
#: without walking the rest. The commands' bytes count in the spool's limit: a trigger
#: keeps their total, so no enqueue has to sum them.
AFTER_ADDED_COLUMNS = """
CREATE INDEX IF NOT EXISTS commands_finished ON commands (finished_ms) WHERE done = 1;
CREATE TABLE IF NOT EXISTS command_bytes (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    total INTEGER NOT NULL
);
INSERT OR IGNORE INTO command_bytes (id, total)
    SELECT 1, COALESCE(SUM(LENGTH(envelope)), 0) FROM commands;
CREATE TRIGGER IF NOT EXISTS command_bytes_added AFTER INSERT ON commands BEGIN
    UPDATE command_bytes SET total = total + LENGTH(NEW.envelope) WHERE id = 1;
END;
CREATE TRIGGER IF NOT EXISTS command_bytes_deleted AFTER DELETE ON commands BEGIN
    UPDATE command_bytes SET total = total - LENGTH(OLD.envelope) WHERE id = 1;
END;
"""


def upgrade(db: sqlite3.Connection) -> None:
    """Create the tables, and add the columns an older spool file lacks."""
    db.executescript(SCHEMA)
    for table, column, declaration in ADDED_COLUMNS:
        present = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        if column not in present:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
    db.executescript(AFTER_ADDED_COLUMNS)
