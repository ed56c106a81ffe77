"""Records of every measured trial: SQLite (WAL) as the source of history, and an
optional JSONL log, one trial a line. Each trial is committed as it is measured,
so a killed run loses nothing and resumes without re-measuring."""
from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass

from ._version import __version__
from .records import Trial

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
"""


@dataclass
class TaskKey:
    """Which trials belong together: a workload on a device, through one template."""
    workload: str
    target: str
    device: str
    template: str


class Database:
    """The SQLite database of trials (table `trials`)."""

    def __init__(self, path: str, log: str | None = None):
        self.path = path
        self.conn = sqlite3.connect(path, timeout=30)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.executescript(_SCHEMA)
        self.conn.execute("INSERT OR IGNORE INTO meta VALUES ('format_version', ?)", (str(FORMAT_VERSION),))
        self.conn.commit()
        self.log = open(log, "a") if log else None

    def add(self, run: str, ts, trial: Trial, model: str = "", explorer: str = "") -> None:
        """Record one trial of task space `ts` (proposed by `model` + `explorer`) and commit it."""
        task, target = ts.task, ts.target
        row = dict(run=run, workload=task.key, op=task.op.name, args=json.dumps(task.args, sort_keys=True),
                   workload_name=task.name, target=target.name, target_options=target.options.model_dump_json(),
                   device=ts.device.fingerprint(), template=ts.template.name, model=model, explorer=explorer,
                   config_index=str(trial.index),
                   config=json.dumps(trial.config), costs=json.dumps(trial.costs),
                   cost=trial.cost if trial.ok else None, error=trial.error, message=trial.message,
                   flops=task.flops, build_s=trial.build_s, run_s=trial.run_s, timestamp=trial.timestamp,
                   version=__version__)
        self.conn.execute(f"INSERT INTO trials ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                          list(row.values()))
        self.conn.commit()
        if self.log:
            self.log.write(json.dumps({"format": FORMAT_VERSION, **row, "costs": trial.costs,
                                       "config": trial.config}) + "\n")
            self.log.flush()

    def trials(self, key: TaskKey) -> list[Trial]:
        """Trials of a task, oldest first."""
        q = ("SELECT config_index, config, costs, error, message, build_s, run_s, timestamp FROM trials "
             "WHERE workload=? AND target=? AND device=? AND template=?")
        params = [key.workload, key.target, key.device, key.template]
        return [Trial(int(r[0]), json.loads(r[1]), json.loads(r[2]), r[3], r[4] or "", r[5] or 0.0, r[6] or 0.0,
                      r[7] or time.time())
                for r in self.conn.execute(q + " ORDER BY id", params)]

    def history(self, target: str, device: str, exclude: set[str], limit: int = 20000) -> list[tuple]:
        """Recent trials of other workloads on this target and device, for transfer:
        (op, args, template, Trial) tuples, newest first, at most `limit`."""
        q = ("SELECT op, args, template, workload, config_index, config, costs, error, message, build_s, run_s, "
             "timestamp FROM trials WHERE target=? AND device=? ORDER BY id DESC")
        out = []
        for r in self.conn.execute(q, (target, device)):
            if r[3] in exclude:
                continue
            out.append((r[0], json.loads(r[1]), r[2], Trial(int(r[4]), json.loads(r[5]), json.loads(r[6]), r[7],
                                                            r[8] or "", r[9] or 0.0, r[10] or 0.0, r[11])))
            if len(out) >= limit:
                break
        return out

    def count(self, key: TaskKey, run: str) -> int:
        return self.conn.execute("SELECT COUNT(*) FROM trials WHERE workload=? AND target=? AND device=? "
                                 "AND template=? AND run=?",
                                 (key.workload, key.target, key.device, key.template, run)).fetchone()[0]

    def best(self, workload: str | None = None, target: str | None = None) -> list[dict]:
        """The best trial per (workload, target, device), with its GFLOPS and trial counts."""
        q = """SELECT workload, workload_name, op, args, target, target_options, device, template, config_index,
                      config, MIN(cost), flops, COUNT(*), SUM(error IS NOT NULL)
               FROM trials GROUP BY workload, target, device"""
        rows = []
        for r in self.conn.execute(q):
            if (workload and workload not in (r[0], r[1])) or (target and target != r[4]):
                continue
            # COUNT/SUM include failed trials; MIN(cost) ignores their NULL cost
            best = self.conn.execute(
                "SELECT config_index, config, template FROM trials WHERE workload=? AND target=? AND device=? "
                "AND cost=? ORDER BY id LIMIT 1", (r[0], r[4], r[6], r[10])).fetchone() if r[10] else None
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
        for name, target, model, explorer, run, cost, flops in self.conn.execute(q):
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
