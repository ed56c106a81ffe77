"""Terminal display of a tuning run: a progress bar per task and a summary table,
both fitting an 80-column terminal."""
from __future__ import annotations

import json

from rich.console import Console, Group
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

BUSY = 0.25   #: a best config timed again at the end this far off was measured on a busy machine


class TuneProgress:
    """Progress bars: trials done, best GFLOPS so far and errors, per task."""

    def __init__(self, console: Console | None = None):
        self.console = console or Console(stderr=True)
        # about 78 columns with a 20-character task name, 3-digit trial counts and "busy N"
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(bar_width=10), MofNCompleteColumn(),
                            TextColumn("best {task.fields[gflops]:6.1f} GFLOPS"),
                            TextColumn("err {task.fields[errors]}{task.fields[busy]}"),
                            TextColumn("tuner {task.fields[share]:3.0%}"),
                            console=self.console, transient=False)
        self.ids: dict[int, int] = {}

    def start(self, states, budget: int) -> None:
        self.bar.start()
        for st in states:
            self.ids[id(st)] = self.bar.add_task(st.ts.task.name[:20], total=budget, completed=st.done,
                                                 gflops=st.best_gflops, errors=st.errors, share=0.0,
                                                 busy="")

    def update(self, st) -> None:
        self.bar.update(self.ids[id(st)], completed=st.done, gflops=st.best_gflops, errors=st.errors,
                        share=st.tuner_share, busy=f" busy {st.suspect}" if st.suspect else "")

    def stop(self) -> None:
        self.bar.stop()


def summary_table(states) -> Group:
    """A table with one row per task (trials of this run, "(+n)" from earlier runs, best
    GFLOPS and time, errors, the tuner's share of the time, why it stopped), then the
    best config of each task in full, one line per task."""
    t = Table(title="tuning summary")
    for col in ("task", "trials", "GFLOPS", "best ms", "err", "tuner", "stopped"):
        t.add_column(col, overflow="fold")
    configs = []
    for st in states:
        b, earlier = st.best, len(st.trials) - st.done
        t.add_row(Text(st.ts.task.name), f"{st.done} (+{earlier})" if earlier else str(st.done),
                  f"{st.best_gflops:.1f}", f"{b.cost * 1e3:.3f}" if b else "-", str(st.errors),
                  f"{st.tuner_share:.0%}", st.finished or "-")
        configs.append(Text(f"{st.ts.task.name}: " + (f"#{b.index} {json.dumps(b.config)}" if b else "-")))
        if b is not None and st.retimed is not None and abs(st.retimed / b.cost - 1) > BUSY:
            configs.append(Text(f"  timed again at the end: {st.ts.task.flops / st.retimed / 1e9:.1f} GFLOPS "
                                f"({st.retimed * 1e3:.3f} ms): the machine was busy while it was measured"))
    if any(st.ts.task.weight > 1 for st in states) and all(st.best for st in states):
        total = sum(st.best.cost * st.ts.task.weight for st in states)
        configs.append(Text(f"network: {total * 1e3:.3f} ms estimated (each task's best time x how often the "
                            "network runs it)"))
    suspect = sum(st.suspect for st in states)
    if suspect:
        configs.append(Text(f"machine busy: {suspect} trials suspect (their repeats still spread over 25% "
                            "after re-timing); rerun on a quiet machine for figures to trust"))
    return Group(t, *configs)
