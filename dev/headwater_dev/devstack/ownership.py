"""Which broker's data an enricher checkpoint belongs to (``devstack up`` and ``serve``).

A Spark checkpoint holds Kafka offsets; against another broker's data they point at records
that are not there, and the enricher stops (rightly) on the mismatch. The embedded broker
formats every data folder with the same cluster id, so the cluster id cannot tell two data
folders apart: each folder gets a random id of its own (:data:`DATA_ID_FILE`, written on the
first start that finds none), and the stack records beside its checkpoint the folder and id
it was written against (:data:`OWNER_FILE`).

On a start, a checkpoint is reused when it is this data's; discarded when it was this
folder's earlier data (the data was removed or reformatted, so its offsets are meaningless
and nobody else can use it); refused, with what to do, when nothing says whose it is.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
from pathlib import Path

from headwater.errors import HeadwaterError

log = logging.getLogger(__name__)

#: In the broker's data folder: that data's identity.
DATA_ID_FILE = "headwater-data-id"
#: Beside the checkpoint (not in it: the folder is Spark's): the data it was written against.
OWNER_FILE = "checkpoint-owner.json"


class CheckpointMismatchError(HeadwaterError, RuntimeError):
    """The checkpoint may belong to another broker's data; the message says what to do."""


def data_id(data_dir: Path) -> str:
    """Return the identity of the broker data in ``data_dir``, creating it on first use."""
    path = data_dir / DATA_ID_FILE
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        ident = secrets.token_hex(16)
        tmp = data_dir / f".{DATA_ID_FILE}.{os.getpid()}"
        tmp.write_text(ident + "\n")
        os.replace(tmp, path)
        return ident


def _has_progress(checkpoint: Path) -> bool:
    """True when Spark wrote anything into ``checkpoint`` (an empty folder holds no offsets)."""
    return checkpoint.is_dir() and any(checkpoint.iterdir())


def _owner_path(checkpoint: Path) -> Path:
    return checkpoint.parent / OWNER_FILE


def _record(checkpoint: Path, data_dir: Path, ident: str) -> None:
    path = _owner_path(checkpoint)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps({"data_dir": str(data_dir.resolve()), "data_id": ident}) + "\n")
    os.replace(tmp, path)


def claim(checkpoint: Path, data_dir: Path) -> str:
    """Make ``checkpoint`` the one of the broker data in ``data_dir``, or refuse.

    Call it after the broker started (its data folder exists) and before the enricher does.

    Returns:
        "new" (no checkpoint yet), "reused" (it is this data's), or "discarded" (it was
        written against this folder's earlier, now removed, data and was deleted).

    Raises:
        CheckpointMismatchError: a checkpoint with no record of its data, or written
            against another folder's data.
    """
    ident = data_id(data_dir)
    here = str(data_dir.resolve())
    if not _has_progress(checkpoint):
        _record(checkpoint, data_dir, ident)
        return "new"
    try:
        owner = json.loads(_owner_path(checkpoint).read_text())
    except (OSError, ValueError):
        owner = None
    if isinstance(owner, dict) and owner.get("data_id") == ident:
        return "reused"
    if isinstance(owner, dict) and owner.get("data_dir") == here:
        log.warning(
            "the enricher checkpoint %s was written against earlier data of %s, which is gone: "
            "starting the enricher with a new checkpoint",
            checkpoint,
            here,
        )
        shutil.rmtree(checkpoint)
        _record(checkpoint, data_dir, ident)
        return "discarded"
    whose = (
        f"it was written against the broker data in {owner.get('data_dir')}"
        if isinstance(owner, dict)
        else f"nothing records which broker's data it was written against (no {OWNER_FILE})"
    )
    raise CheckpointMismatchError(
        f"the enricher checkpoint {checkpoint} does not belong to this broker's data ({here}): "
        f"{whose}, and its offsets would point at records that are not there. Remove it to "
        f"start the enricher from the beginning of this broker's topics (`rm -rf {checkpoint}`), "
        "or give this stack another --workdir"
    )
