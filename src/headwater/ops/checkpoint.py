"""Read, and on request move, the starting point in a Spark checkpoint of the enricher.

For the case where retention deleted data under a stopped query: the enricher refuses to
skip it (``failOnDataLoss``), and a person decides where to start instead. Spark's offset log
(``<checkpoint>/offsets/<batch>``) holds, per batch, one JSON line per source with the
offsets the batch ends at (``{"topic": {"partition": offset}}`` for Headwater's source);
the next batch starts where the last *committed* batch ended (``<checkpoint>/commits``).

Moving the start rewrites the last committed batch's end offsets for the named
partitions and sets aside any batch that was planned but never committed, so the next
run plans afresh from the new point. State store versions stay aligned with the batch
ids, because no batch id is added or removed from the committed history. Every file
changed is first copied to ``<checkpoint>/headwater-backup-<time>/``.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from headwater.errors import HeadwaterError


class CheckpointError(HeadwaterError, RuntimeError):
    """The checkpoint cannot be read or changed as asked; the message says why."""


@dataclass(frozen=True)
class SourceOffsets:
    """The end offsets of one source in one batch."""

    index: int
    offsets: dict[str, dict[str, int]] | None  # None: not a Headwater Kafka source


@dataclass(frozen=True)
class CheckpointView:
    """What a checkpoint holds."""

    location: Path
    last_committed: int | None
    last_planned: int | None
    sources: list[SourceOffsets]

    def rows(self) -> list[dict[str, object]]:
        """One row per (source, topic, partition) of the last committed batch."""
        rows: list[dict[str, object]] = []
        for source in self.sources:
            for topic, parts in (source.offsets or {}).items():
                for partition, offset in sorted(parts.items(), key=lambda kv: int(kv[0])):
                    rows.append(
                        {
                            "batch": self.last_committed,
                            "source": source.index,
                            "topic": topic,
                            "partition": int(partition),
                            "next_offset": offset,
                        }
                    )
        return rows


def _checksum(path: Path) -> Path:
    return path.with_name(f".{path.name}.crc")


def _batches(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def _parse_source(line: str) -> dict[str, dict[str, int]] | None:
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return None
    if isinstance(value, dict) and all(isinstance(v, dict) for v in value.values()):
        return {t: {p: int(o) for p, o in parts.items()} for t, parts in value.items()}
    return None


def read_checkpoint(location: str | Path) -> CheckpointView:
    """Return the last committed and last planned batch and the committed end offsets."""
    root = Path(location)
    offsets, commits = _batches(root / "offsets"), _batches(root / "commits")
    if not offsets:
        raise CheckpointError(f"{root} holds no offset log: is it the enricher's checkpoint?")
    committed = commits[-1] if commits else None
    sources: list[SourceOffsets] = []
    if committed is not None:
        lines = (root / "offsets" / str(committed)).read_text().splitlines()
        if not lines or lines[0] != "v1":
            raise CheckpointError(f"unknown offset log version in {root}/offsets/{committed}")
        sources = [SourceOffsets(i, _parse_source(line)) for i, line in enumerate(lines[2:])]
    return CheckpointView(root, committed, offsets[-1], sources)


def set_start(
    location: str | Path, new_start: dict[tuple[str, int], int]
) -> tuple[CheckpointView, Path]:
    """Make the next batch start at ``new_start``; return the new view and the backup dir.

    Only call this while the query is stopped.
    """
    view = read_checkpoint(location)
    root = view.location
    if view.last_committed is None:
        raise CheckpointError(
            "no committed batch yet: start the query with explicit starting offsets instead"
        )
    path = root / "offsets" / str(view.last_committed)
    lines = path.read_text().splitlines()
    found: set[tuple[str, int]] = set()
    for source in view.sources:
        if source.offsets is None:
            continue
        changed = False
        for (topic, partition), offset in new_start.items():
            if str(partition) in source.offsets.get(topic, {}):
                source.offsets[topic][str(partition)] = offset
                found.add((topic, partition))
                changed = True
        if changed:
            lines[2 + source.index] = json.dumps(source.offsets, separators=(",", ":"))
    missing = set(new_start) - found
    if missing:
        raise CheckpointError(
            f"the checkpoint has no offsets for {sorted(missing)}; `headwater offsets checkpoint "
            "show` lists what it holds"
        )
    backup = root / f"headwater-backup-{time.strftime('%Y%m%dT%H%M%S')}"
    backup.mkdir()
    shutil.copy2(path, backup / f"offsets-{view.last_committed}")
    for batch in _batches(root / "offsets"):
        if batch > view.last_committed:  # planned, never committed: plan afresh
            shutil.move(str(root / "offsets" / str(batch)), backup / f"offsets-{batch}")
            _checksum(root / "offsets" / str(batch)).unlink(missing_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("\n".join(lines))
    tmp.replace(path)
    # Hadoop's local file system keeps a checksum beside each file; a stale one would make
    # Spark refuse the rewritten file, and a missing one is simply not checked.
    _checksum(path).unlink(missing_ok=True)
    return read_checkpoint(root), backup
