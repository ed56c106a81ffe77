"""Terminal display of a tuning run: a progress bar per task and a summary table."""
from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table


class TuneProgress:
    """Progress bars: trials done, best GFLOPS so far and errors, per task."""

    def __init__(self, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("best {task.fields[gflops]:8.1f} GFLOPS"),
                            TextColumn("errors {task.fields[errors]}"),
                            TextColumn("tuner {task.fields[share]:4.0%}"), TimeElapsedColumn(),
                            console=self.console, transient=False)
        self.ids: dict[int, int] = {}

    def start(self, states, budget: int) -> None:
        self.bar.start()
        for st in states:
            self.ids[id(st)] = self.bar.add_task(st.ts.task.name[:40], total=budget, completed=st.done,
                                                 gflops=st.best_gflops, errors=st.errors, share=0.0)

    def update(self, st) -> None:
        self.bar.update(self.ids[id(st)], completed=st.done, gflops=st.best_gflops, errors=st.errors,
                        share=st.tuner_share)

    def stop(self) -> None:
        self.bar.stop()


def summary_table(states) -> Table:
    """One row per task: trials, best GFLOPS and time, errors, tuner time, the best config."""
    t = Table(title="tuning summary")
    for col in ("task", "trials", "best GFLOPS", "best ms", "errors", "tuner s", "measure s", "tuner %",
                "stopped", "config"):
        t.add_column(col, overflow="fold")
    for st in states:
        b = st.best
        t.add_row(st.ts.task.name, f"{st.done} (+{len(st.trials) - st.done} earlier)",
                  f"{st.best_gflops:.1f}", f"{b.cost * 1e3:.3f}" if b else "-", str(st.errors),
                  f"{st.fit_s + st.propose_s:.1f}", f"{st.measure_s:.1f}", f"{st.tuner_share:.0%}",
                  st.finished or "-",
                  f"#{b.index} {b.config}" if b else "-")
    return t
