"""Terminal display of a tuning run: a progress bar per task and a summary table,
both fitting an 80-column terminal."""
from __future__ import annotations

import json
from collections import Counter

from rich.console import Console, Group
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

BUSY = 0.25   #: a best config timed again at the end this far off was measured on a busy machine


class _Bars(Progress):
    """Progress bars with a line under them (the network's estimated latency)."""
    footer = ""

    def get_renderables(self):
        yield self.make_tasks_table(self.tasks)
        if self.footer:
            yield Text(self.footer)


class TuneProgress:
    """Progress bars: trials done, best GFLOPS so far and errors, per task (and
    template); for a network, its estimated latency so far."""

    def __init__(self, console: Console | None = None):
        self.console = console or Console(stderr=True)
        # about 78 columns with a 20-character task name, 3-digit trial counts and "busy N"
        self.bar = _Bars(TextColumn("{task.description}"), BarColumn(bar_width=10), MofNCompleteColumn(),
                            TextColumn("best {task.fields[gflops]:6.1f} GFLOPS"),
                            TextColumn("err {task.fields[errors]}{task.fields[busy]}"),
                            TextColumn("tuner {task.fields[share]:3.0%}"),
                            console=self.console, transient=False)
        self.ids: dict[int, int] = {}

    def start(self, states, budget: int) -> None:
        self.bar.start()
        for st, name in zip(states, labels(states, 20)):
            self.ids[id(st)] = self.bar.add_task(name, total=budget, completed=st.done,
                                                 gflops=st.best_gflops, errors=st.errors, share=0.0,
                                                 busy="")
        self.states = states
        self._footer()

    def update(self, st) -> None:
        self.bar.update(self.ids[id(st)], completed=st.done, gflops=st.best_gflops, errors=st.errors,
                        share=st.tuner_share, busy=f" busy {st.suspect}" if st.suspect else "")
        self._footer()

    def _footer(self) -> None:
        est = network_estimate(self.states)
        self.bar.footer = f"network: {est * 1e3:.3f} ms estimated so far" if est is not None else ""

    def stop(self) -> None:
        self.bar.stop()


def labels(states, width: int | None = None) -> list[str]:
    """Each state's task name (cut to `width`), and its template where the task is tuned on several."""
    counts = Counter(st.key.workload for st in states)
    tails = [f" [{st.ts.template.name}]" if counts[st.key.workload] > 1 else "" for st in states]
    return [(st.ts.task.name[: width - len(tail)] if width else st.ts.task.name) + tail
            for st, tail in zip(states, tails)]


def summary_table(states) -> Group:
    """A table with one row per task (trials of this run, "(+n)" from earlier runs, best
    GFLOPS and time, errors, the tuner's share of the time, why it stopped), then the
    best config of each task in full, one line per task."""
    t = Table(title="tuning summary")
    for col in ("task", "trials", "GFLOPS", "best ms", "err", "tuner", "stopped"):
        t.add_column(col, overflow="fold")
    configs = []
    for st, name in zip(states, labels(states)):
        b, earlier = st.best, len(st.trials) - st.done
        t.add_row(Text(name), f"{st.done} (+{earlier})" if earlier else str(st.done),
                  f"{st.best_gflops:.1f}", f"{b.cost * 1e3:.3f}" if b else "-", str(st.errors),
                  f"{st.tuner_share:.0%}", st.finished or "-")
        configs.append(Text(f"{name}: " + (f"#{b.index} {json.dumps(b.config)}" if b else "-")))
        if b is not None and st.retimed is not None and abs(st.retimed / b.cost - 1) > BUSY:
            configs.append(Text(f"  timed again at the end: {st.ts.task.flops / st.retimed / 1e9:.1f} GFLOPS "
                                f"({st.retimed * 1e3:.3f} ms): the machine was busy while it was measured"))
    if (total := network_estimate(states)) is not None:
        configs.append(Text(f"network: {total * 1e3:.3f} ms estimated (each task's best time x how often the "
                            "network runs it)"))
    suspect = sum(st.suspect for st in states)
    if suspect:
        configs.append(Text(f"machine busy: {suspect} trials suspect (their repeats still spread over 25% "
                            "after re-timing); rerun on a quiet machine for figures to trust"))
    return Group(t, *configs)


def network_estimate(states) -> float | None:
    """Seconds of one network run: each task's best time (over its templates) times its weight;
    None unless the states are a network's (weighted) and every task has a best time."""
    best: dict[str, list] = {}
    for st in states:
        b = best.setdefault(st.key.workload, [None, st.ts.task.weight])
        if st.best is not None and (b[0] is None or st.best.cost < b[0]):
            b[0] = st.best.cost
    if not any(w > 1 for _, w in best.values()) or any(c is None for c, _ in best.values()):
        return None
    return sum(c * w for c, w in best.values())
