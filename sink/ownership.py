"""One sink per table: the :data:`OWNER_PROPERTY` table property names the consumer group of the
sink that writes the table (:meth:`sink.iceberg.IcebergTables.check_owner`); a sink claims a table
that names nobody, or the group it replaces, and reads the claim back."""

from __future__ import annotations

import logging
from typing import Any

from transforms.errors import CdcnormError

__all__ = ["OWNER_PROPERTY", "TableOwnershipError", "claim", "verify_owner"]

log = logging.getLogger("cdcnorm.sink")

# the group_id of the sink that writes the table (check_owner): one writer per table
OWNER_PROPERTY = "cdcnorm.owner"


class TableOwnershipError(CdcnormError):
    """Another sink owns the table (:data:`OWNER_PROPERTY`): this sink stops without writing it."""

    def __init__(self, tid: str, owner: str | None, group: str) -> None:
        super().__init__(
            f"table {tid} belongs to another sink: its {OWNER_PROPERTY} table property names consumer group "
            f"{owner!r}, and this sink's group_id is {group!r}. Two sinks writing one table conflict on every "
            "commit, and with a catalog that cannot fence concurrent commits (hadoop on a local or object-store "
            "file system) can lose changes, so this sink stops without writing it. If that sink is gone for good "
            f"and this one replaces it, set sink.take_over_tables_from: {owner!r} (or clear the marker: ALTER TABLE "
            f"{tid} UNSET TBLPROPERTIES ('{OWNER_PROPERTY}')) and start this sink again; a sink still running "
            "under that group then stops at its next micro-batch."
        )
        self.table = tid
        self.owner = owner


def claim(jt: Any, tid: str, group: str, previous: str | None) -> None:
    """Set ``group`` as the Java table ``jt``'s owner, then read it back: of two sinks claiming at
    once, the one whose claim was overwritten stops (:class:`TableOwnershipError`)."""
    jt.updateProperties().set(OWNER_PROPERTY, group).commit()
    verify_owner(jt, tid, group)
    log.warning(
        "table %s now belongs to this sink (group %s); it %s", tid, group,
        f"belonged to group {previous}" if previous else "had no owner",
    )


def verify_owner(jt: Any, tid: str, group: str) -> None:
    """Raise :class:`TableOwnershipError` unless the table's metadata, read again, names ``group``."""
    jt.refresh()
    owner = jt.properties().get(OWNER_PROPERTY)
    if owner != group:
        raise TableOwnershipError(tid, owner, group)
