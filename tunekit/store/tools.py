"""Getting trials back: import a JSONL log into a database, and copy the readable
rows of a damaged database into a new one (`tunekit db import | recover`)."""
from __future__ import annotations

import json
import os
import sqlite3
from contextlib import closing
from urllib.parse import quote

from tunekit.errors import StorageError
from tunekit.store.database import Database

#: the columns of table `trials` that a record carries (id is the database's own)
COLUMNS = ("run", "workload", "op", "args", "workload_name", "target", "target_options", "device", "template",
           "model", "explorer", "config_index", "config", "costs", "cost", "error", "message", "flops", "build_s",
           "run_s", "timestamp", "version")
_REQUIRED = ("run", "workload", "op", "args", "target", "target_options", "device", "template", "config_index",
             "config", "costs")
#: what makes two rows the same measurement (so importing twice adds nothing)
_IDENTITY = ("run", "workload", "target", "device", "template", "config_index", "timestamp")


def _row(record: dict) -> dict:
    """A `trials` row from a JSONL record (lists and dicts as the JSON text the table keeps)."""
    row = {c: record.get(c) for c in COLUMNS}
    for c in ("config", "costs", "args", "target_options"):
        if not isinstance(row[c], str):
            row[c] = json.dumps(row[c], sort_keys=c == "args")
    return row


def _fresh(dest: str) -> Database:
    if os.path.exists(dest):
        raise StorageError(f"{dest}: already exists; give a new file (nothing is ever overwritten)")
    return Database(dest)


def _known(db: Database) -> set:
    return set(db._rows(f"SELECT {', '.join(_IDENTITY)} FROM trials"))


def import_log(log: str, dest: str) -> tuple[int, int, int]:
    """Add the records of JSONL log `log` to database `dest` (created if missing),
    skipping records it already holds and lines that are not whole records.

    Returns:
        (records imported, records already there, bad lines skipped).
    """
    try:
        lines = open(log, encoding="utf-8", errors="replace").read().splitlines()
    except OSError as e:
        raise StorageError(f"{log}: cannot read the log: {e.strerror or e}") from None
    with closing(Database(dest)) as db:
        known, added, dup, bad = _known(db), 0, 0, 0
        for line in lines:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if not isinstance(record, dict) or any(record.get(c) is None for c in _REQUIRED):
                    raise ValueError("not a trial record")
            except ValueError:   # a torn line (killed writer) or foreign text
                bad += 1
                continue
            row = _row(record)
            ident = tuple(row[c] for c in _IDENTITY)
            if ident in known:
                dup += 1
                continue
            db.insert(row)
            known.add(ident)
            added += 1
    return added, dup, bad


def recover(src: str, dest: str) -> tuple[int, int]:
    """Copy every readable row of table `trials` of a damaged database `src` into
    the new database `dest` (`src` is only read).

    Returns:
        (rows recovered, rows that could not be read).
    """
    if not os.path.isfile(src):
        raise StorageError(f"{src}: no such file")
    try:
        conn = sqlite3.connect(f"file:{quote(os.path.abspath(src))}?immutable=1", uri=True)
        lo, hi = conn.execute("SELECT MIN(id), MAX(id) FROM trials").fetchone()
    except sqlite3.DatabaseError as e:
        raise StorageError(f"{src}: nothing can be read from it ({e}); rebuild from a JSONL log with "
                           "`tunekit db import LOG NEW.db` if the run kept one") from None
    got = lost = 0
    with closing(conn), closing(_fresh(dest)) as db:
        stack = [(lo, hi)] if lo is not None else []
        while stack:   # read id ranges; halve a range that fails until single unreadable rows are left
            a, b = stack.pop()
            try:
                rows = conn.execute(f"SELECT {', '.join(COLUMNS)} FROM trials WHERE id BETWEEN ? AND ? ORDER BY id",
                                    (a, b)).fetchall()
            except sqlite3.DatabaseError:
                if a == b:
                    lost += 1
                else:
                    mid = (a + b) // 2
                    stack += [(mid + 1, b), (a, mid)]
                continue
            for r in rows:
                db.insert(dict(zip(COLUMNS, r)))
            got += len(rows)
    return got, lost
