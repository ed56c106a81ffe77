"""Records of every measured trial: SQLite (WAL) as the source of history, and an
optional JSONL log, one trial a line. Each trial is committed as it is measured,
so a killed run loses nothing and resumes without re-measuring."""
from __future__ import annotations

import itertools
import json
import os
import socket
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from urllib.parse import quote

from tunekit._version import __version__
from tunekit.errors import StorageError
from tunekit.records import Trial

FORMAT_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS trials (
    id INTEGER PRIMARY KEY,
    run TEXT NOT NULL,            -- recipe hash (budgets excluded) + seed
    workload TEXT NOT NULL,       -- workload key: hash of op + canonical args
    op TEXT NOT NULL,
    args TEXT NOT NULL,
    workload_name TEXT,
    target TEXT NOT NULL,
    target_options TEXT NOT NULL,
    device TEXT NOT NULL,         -- device fingerprint
    template TEXT NOT NULL,
    model TEXT, explorer TEXT,    -- the search that proposed it
    config_index TEXT NOT NULL,   -- text: indices can exceed 2**63
    config TEXT NOT NULL,         -- knob values, JSON
    space TEXT,                   -- fingerprint of the config space config_index indexes (NULL: older records)
    code TEXT,                    -- fingerprint of the code that made the program (TaskSpace.code; NULL: older)
    costs TEXT NOT NULL,          -- seconds per run, JSON list; empty on error
    cost REAL,                    -- median of costs; NULL on error
    error TEXT,
    message TEXT,
    flops INTEGER,
    build_s REAL, run_s REAL, timestamp REAL,
    version TEXT
);
CREATE INDEX IF NOT EXISTS trials_task ON trials (workload, target, device, template);
CREATE INDEX IF NOT EXISTS trials_run ON trials (run, workload);
CREATE TABLE IF NOT EXISTS computations (   -- what a computed op's workload computes (TaskSpec.computation)
    workload TEXT PRIMARY KEY, computation TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS claims (   -- configs a tuner process is about to measure (several may share a database)
    workload TEXT NOT NULL, target TEXT NOT NULL, device TEXT NOT NULL, template TEXT NOT NULL,
    space TEXT NOT NULL, code TEXT NOT NULL, config_index TEXT NOT NULL,
    run TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL, timestamp REAL,   -- refreshed with each trial
    PRIMARY KEY (workload, target, device, template, space, code, config_index)
);
"""
#: a claim its process has not refreshed for this long is dropped (the process is gone, on any host)
CLAIM_TTL_S = 600.0


@dataclass
class TaskKey:
    """Which trials belong together: a workload on a device, through one template."""
    workload: str
    target: str
    device: str
    template: str


class Database:
    """The SQLite database of trials (table `trials`).

    Opened for writing (the tuner), it is created if missing, in WAL mode, with
    every problem said before anything is measured: a missing or read-only
    directory, a file that is not a tunekit database or is corrupted (never
    overwritten), a log that cannot be written. Opened `readonly` (best, show,
    report, apply_history_best) it is never written, so a database shipped on
    read-only storage can be read.
    """

    def __init__(self, path: str, log: str | None = None, *, readonly: bool = False):
        self.path, self.readonly = str(path), readonly
        self.conn = _connect(self.path, readonly)
        try:
            if readonly:
                self.conn.execute("SELECT 1 FROM trials LIMIT 1").fetchall()
            else:
                self._prepare()
        except sqlite3.DatabaseError as e:
            self.conn.close()
            raise storage_error(self.path, e) from None
        self.log = open_log(log) if log else None

    def _prepare(self, wait_s: float = 30.0) -> None:
        """Switch to WAL and create the tables. The journal-mode switch does not wait for
        a lock: when another process is creating the same database, try again."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self.conn.execute("PRAGMA journal_mode=WAL")
                if "code" not in {r[1] for r in self.conn.execute("PRAGMA table_info(claims)")}:
                    self.conn.execute("DROP TABLE IF EXISTS claims")   # an older tunekit's (claims are transient)
                self.conn.executescript(_SCHEMA)
                cols = {r[1] for r in self.conn.execute("PRAGMA table_info(trials)")}
                for col in {"space", "code"} - cols:   # a database of an older tunekit
                    self.conn.execute(f"ALTER TABLE trials ADD COLUMN {col} TEXT")
                self.conn.execute("INSERT OR IGNORE INTO meta VALUES ('format_version', ?)", (str(FORMAT_VERSION),))
                self.conn.commit()
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    @cached_property
    def _space(self) -> str:
        """The `space` and `code` columns, or NULLs in a database of an older tunekit opened read-only."""
        cols = {r[1] for r in self._rows("PRAGMA table_info(trials)")}
        return ", ".join(c if c in cols else "NULL" for c in ("space", "code"))

    @contextmanager
    def _sqlite(self):
        """SQLite errors inside as StorageErrors naming the file (a corrupted one is no traceback)."""
        try:
            yield
        except sqlite3.DatabaseError as e:
            raise storage_error(self.path, e) from None

    def _rows(self, sql: str, params=()) -> list[tuple]:
        """Run a query."""
        with self._sqlite():
            return self.conn.execute(sql, params).fetchall()

    def add(self, run: str, ts, trial: Trial, model: str = "", explorer: str = "") -> int:
        """Record one trial of task space `ts` (proposed by `model` + `explorer`) and commit it;
        return its row id."""
        task, target = ts.task, ts.target
        row = dict(run=run, workload=task.key, op=task.op.name, args=json.dumps(task.args, sort_keys=True),
                   workload_name=task.name, target=target.name, target_options=target.options.model_dump_json(),
                   device=ts.fingerprint, template=ts.template.name, model=model, explorer=explorer,
                   config_index=str(trial.index), space=ts.space.fingerprint(), code=ts.code,
                   config=json.dumps(trial.config), costs=json.dumps(trial.costs),
                   cost=trial.cost if trial.ok else None, error=trial.error, message=trial.message,
                   flops=task.flops, build_s=trial.build_s, run_s=trial.run_s, timestamp=trial.timestamp,
                   version=__version__)
        computation = task.spec().computation
        if computation is not None:   # its op is in no registry: keep what rebuilds it (committed with the trial)
            with self._sqlite():
                self.conn.execute("INSERT OR IGNORE INTO computations VALUES (?, ?)", (task.key, computation))
        rid = self.insert(row)
        if self.log:
            try:
                self.log.write(json.dumps({"format": FORMAT_VERSION, **row, "costs": trial.costs,
                                           "config": trial.config}) + "\n")
                self.log.flush()
            except OSError as e:
                raise StorageError(f"{self.log.name}: cannot append to the log: {e.strerror or e}; the trial is "
                                   f"in {self.path}; free space or fix the path, and rerun to resume") from None
        return rid

    def insert(self, row: dict) -> int:
        """Insert one row of table `trials` (column -> value), commit it, return its id; the claims this
        process holds are refreshed with it (they are alive)."""
        with self._sqlite():
            self.conn.execute("UPDATE claims SET timestamp=? WHERE host=? AND pid=?",
                              (time.time(), socket.gethostname(), os.getpid()))
            cur = self.conn.execute(f"INSERT INTO trials ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                                    list(row.values()))
            self.conn.commit()
            return cur.lastrowid

    def trials(self, key: TaskKey) -> list[Trial]:
        """Trials of a task, oldest first."""
        return [trial for _, _, trial in self.new_trials(key)]

    def new_trials(self, key: TaskKey, after: int = 0) -> list[tuple[int, str, Trial]]:
        """Trials of a task recorded after row id `after` (by any process): (id, run, Trial), oldest first."""
        q = (f"SELECT id, run, config_index, config, costs, error, message, build_s, run_s, timestamp, {self._space} "
             "FROM trials WHERE workload=? AND target=? AND device=? AND template=? AND id>? ORDER BY id")
        return [(r[0], r[1], Trial(int(r[2]), json.loads(r[3]), json.loads(r[4]), r[5], r[6] or "", r[7] or 0.0,
                                   r[8] or 0.0, r[9] or time.time(), r[10] or "", r[11] or ""))
                for r in self._rows(q, (key.workload, key.target, key.device, key.template, after))]

    def rekey(self, row: int, index: int, space: str) -> None:
        """Record that trial `row` is config `index` of the space whose fingerprint is `space`
        (its config, read against a changed template's space)."""
        with self._sqlite(), self.conn:
            self.conn.execute("UPDATE trials SET config_index=?, space=? WHERE id=?", (str(index), space, row))

    def claim(self, key: TaskKey, run: str, indices: list[int], budget: int, run_budget: int, space: str,
              code: str) -> tuple[list[int], list[int]]:
        """Claim configs of a task for measuring, atomically across processes: those not measured in space
        `space` by code `code` (`TaskSpace.code`) nor claimed there by another live process, while the run's
        trials plus pending claims stay within `budget` for this task and `run_budget` over all its tasks.
        Claims of gone processes are dropped first: of an ended process of this host, or of any host not
        refreshed for `CLAIM_TTL_S`. Returns (indices this process got, indices another process measured
        or claimed); the rest were left out by the budgets."""
        host, me, now = socket.gethostname(), os.getpid(), time.time()
        task = (key.workload, key.target, key.device, key.template)
        where = "workload=? AND target=? AND device=? AND template=?"
        unmeasured = ("NOT EXISTS (SELECT 1 FROM trials t WHERE t.workload=c.workload AND t.target=c.target AND "
                      "t.device=c.device AND t.template=c.template AND t.config_index=c.config_index AND "
                      "t.space=c.space AND t.code=c.code)")
        with self._sqlite(), self.conn:   # one IMMEDIATE transaction: two processes never both take a config
            self.conn.execute("BEGIN IMMEDIATE")
            for (pid,) in self.conn.execute("SELECT DISTINCT pid FROM claims WHERE host=?", (host,)).fetchall():
                if pid != me and not _alive(pid):
                    self.conn.execute("DELETE FROM claims WHERE host=? AND pid=?", (host, pid))
            self.conn.execute("DELETE FROM claims WHERE timestamp<?", (now - CLAIM_TTL_S,))
            self.conn.execute(f"DELETE FROM claims WHERE {where} AND pid=? AND host=?", (*task, me, host))
            one = lambda sql, *p: self.conn.execute(sql, p).fetchone()[0]
            left = min(budget - one(f"SELECT COUNT(*) FROM trials WHERE {where} AND run=?", *task, run)
                       - one(f"SELECT COUNT(*) FROM claims c WHERE {where} AND run=? AND {unmeasured}", *task, run),
                       run_budget - one("SELECT COUNT(*) FROM trials WHERE run=?", run)
                       - one(f"SELECT COUNT(*) FROM claims c WHERE run=? AND {unmeasured}", run))
            got, taken = [], []
            for i in indices:
                if len(got) >= left:
                    break
                measured = one(f"SELECT COUNT(*) FROM trials WHERE {where} AND config_index=? AND space=? "
                               "AND code=?", *task, str(i), space, code)
                if not measured and self.conn.execute(
                        "INSERT OR IGNORE INTO claims VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (*task, space, code, str(i), run, host, me, now)).rowcount == 1:
                    got.append(i)
                else:
                    taken.append(i)
        return got, taken

    def history(self, target: str, device: str, exclude: set[str], limit: int | None = 20000) -> list[tuple]:
        """Recent trials of other workloads on this target and device, for transfer:
        (op, args, template, Trial, computation) tuples, newest first, at most `limit` (None: all)
        (computation: what rebuilds a computed op, `TaskSpec.computation`; else None)."""
        q = ("SELECT op, args, template, workload, config_index, config, costs, error, message, build_s, run_s, "
             f"timestamp, {self._space} FROM trials WHERE target=? AND device=? ORDER BY id DESC")
        rows = (r for r in self._rows(q, (target, device)) if r[3] not in exclude)
        return [(r[0], json.loads(r[1]), r[2], Trial(int(r[4]), json.loads(r[5]), json.loads(r[6]), r[7], r[8] or "",
                                                     r[9] or 0.0, r[10] or 0.0, r[11], r[12] or "", r[13] or ""),
                 self.computation(r[3])) for r in itertools.islice(rows, limit)]

    def devices(self) -> list[tuple[str, str]]:
        """The (target, device fingerprint) pairs that measured its trials."""
        return self._rows("SELECT DISTINCT target, device FROM trials ORDER BY target, device")

    def computation(self, workload: str) -> str | None:
        """Return what rebuilds the computed op of `workload` (`TaskSpec.computation`), or None
        (a registered op's workload, or a database of an older tunekit)."""
        cache = self.__dict__.setdefault("_computations", {})
        if workload not in cache:
            try:
                rows = self.conn.execute("SELECT computation FROM computations WHERE workload=?",
                                         (workload,)).fetchall()
            except sqlite3.OperationalError:   # no such table: an older database opened read-only
                rows = []
            cache[workload] = rows[0][0] if rows else None
        return cache[workload]

    def templates(self, workload: str, target: str, device: str) -> list[str]:
        """The templates that trials of a workload on a device were measured through."""
        return [r[0] for r in self._rows("SELECT DISTINCT template FROM trials WHERE workload=? AND target=? AND "
                                         "device=? ORDER BY template", (workload, target, device))]

    def count(self, key: TaskKey, run: str) -> int:
        return self._rows("SELECT COUNT(*) FROM trials WHERE workload=? AND target=? AND device=? AND template=? "
                          "AND run=?", (key.workload, key.target, key.device, key.template, run))[0][0]

    def best(self, workload: str | None = None, target: str | None = None) -> list[dict]:
        """The best trial per (workload, target, device), with its GFLOPS and trial counts."""
        q = """SELECT workload, workload_name, op, args, target, target_options, device, template, config_index,
                      config, MIN(cost), flops, COUNT(*), SUM(error IS NOT NULL)
               FROM trials GROUP BY workload, target, device"""
        rows = []
        for r in self._rows(q):
            if (workload and workload not in (r[0], r[1])) or (target and target != r[4]):
                continue
            # COUNT/SUM include failed trials; MIN(cost) ignores their NULL cost
            best = self._rows(
                "SELECT config_index, config, template FROM trials WHERE workload=? AND target=? AND device=? "
                "AND cost=? ORDER BY id LIMIT 1", (r[0], r[4], r[6], r[10]))[0] if r[10] else None
            rows.append(dict(workload=r[0], name=r[1], op=r[2], args=json.loads(r[3]), target=r[4],
                             target_options=json.loads(r[5]), device=r[6],
                             template=best[2] if best else r[7], index=int(best[0]) if best else None,
                             config=json.loads(best[1]) if best else None, cost=r[10],
                             gflops=(r[11] / r[10] / 1e9) if r[10] else 0.0, trials=r[12], errors=r[13]))
        return rows

    def curves(self) -> dict[tuple, list[tuple[int, float]]]:
        """Best-so-far GFLOPS after each trial, per (workload name, target, model,
        explorer, run): {key: [(trial number, GFLOPS), ...]} in measuring order."""
        out: dict[tuple, list] = {}
        best: dict[tuple, float] = {}
        q = "SELECT workload_name, target, model, explorer, run, cost, flops FROM trials ORDER BY id"
        for name, target, model, explorer, run, cost, flops in self._rows(q):
            key = (name, target, model, explorer, run)
            g = flops / cost / 1e9 if cost else 0.0
            best[key] = max(best.get(key, 0.0), g)
            curve = out.setdefault(key, [])
            curve.append((len(curve) + 1, best[key]))
        return out

    def close(self) -> None:
        self.conn.close()
        if self.log:
            self.log.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # alive, another user's
        return True
    return True


def _connect(path: str, readonly: bool) -> sqlite3.Connection:
    if readonly:
        if not os.path.isfile(path):
            raise StorageError(f"{path}: no such database (run `tunekit tune RECIPE` first)")
        uri = f"file:{quote(os.path.abspath(path))}"
        conn = sqlite3.connect(uri + "?mode=ro", uri=True, timeout=30)
        try:
            conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
            return conn
        except sqlite3.OperationalError:
            # read-only storage: WAL needs a writable -shm file; immutable reads the file as it is
            conn.close()
            return sqlite3.connect(uri + "?immutable=1", uri=True)
        except sqlite3.DatabaseError as e:
            conn.close()
            raise storage_error(path, e) from None
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise StorageError(f"{path}: the folder {folder} does not exist; create it or set another [database] path")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise StorageError(f"{path}: cannot write there (read-only storage or no permission); set another "
                           "[database] path (`tunekit best` still reads it)")
    try:
        return sqlite3.connect(path, timeout=30)
    except sqlite3.DatabaseError as e:
        raise storage_error(path, e) from None


def integrity(path: str) -> str:
    """SQLite's verdict on the file at `path` (PRAGMA integrity_check), as one line."""
    try:
        conn = sqlite3.connect(f"file:{quote(os.path.abspath(path))}?mode=ro", uri=True)
        try:
            rows = [r[0] for r in conn.execute("PRAGMA integrity_check").fetchmany(3)]
        finally:
            conn.close()
        return "; ".join(rows)
    except sqlite3.DatabaseError as e:
        return f"unreadable ({e})"


def storage_error(path: str, e: sqlite3.DatabaseError) -> StorageError:
    """The StorageError for SQLite error `e` on database `path`: what happened and the way out."""
    text = str(e)
    if "full" in text or "I/O error" in text:
        return StorageError(f"{path}: cannot write any more ({text}: the disk is full, a file size limit was "
                            "reached, or the storage fails); every trial measured before is committed; free space "
                            "and rerun to resume")
    if "readonly" in text or "unable to open" in text:
        return StorageError(f"{path}: cannot write the database ({text}); set another [database] path")
    if "locked" in text or "busy" in text:
        return StorageError(f"{path}: another process has held the database locked for over 30 s ({text}); "
                            "wait for it or set another [database] path")
    if "no such table" in text:
        return StorageError(f"{path}: an SQLite file, but not a tunekit database ({text}); nothing was changed in "
                            "it; set another [database] path")
    return StorageError(f"{path}: not a usable tunekit database: {text} (integrity check: {integrity(path)}); "
                        f"nothing was changed in it. Copy out what is readable with `tunekit db recover {path} "
                        "NEW.db` (or rebuild from a JSONL log: `tunekit db import LOG NEW.db`), or set another "
                        "[database] path")


def open_log(path: str):
    """Open the JSONL log for appending, on a new line: a torn last line (a killed
    writer) is ended first, so the next record is never glued onto it."""
    try:
        with open(path, "a+b") as f:   # closed on an error too
            if f.tell() > 0:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    f.write(b"\n")
        return open(path, "a", encoding="utf-8")
    except OSError as e:
        raise StorageError(f"{path}: cannot write the log: {e.strerror or e}; fix [database] log or leave it out") \
            from None
