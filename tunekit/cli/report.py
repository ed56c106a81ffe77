"""`tunekit report`: best-so-far GFLOPS against trials, as a PNG and a table."""
from __future__ import annotations

from collections import Counter
from contextlib import closing

from tunekit.errors import TunekitError
from tunekit.store.database import Database


def plot_curves(curves: dict, path: str, title: str = "best GFLOPS found vs trials") -> None:
    """Write a PNG with one best-so-far curve per key (needs matplotlib: the `report` extra)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise TunekitError("plotting needs matplotlib: pip install 'tunekit[report]'") from None
    fig, ax = plt.subplots(figsize=(8, 5))
    for label, pts in curves.items():
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label)
    ax.set_xlabel("trials")
    ax.set_ylabel("best GFLOPS so far")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def report(db_path: str, png: str | None) -> list[list[str]]:
    """Rows of the summary table (task, target, run, trials, best GFLOPS); writes `png` if given."""
    with closing(Database(db_path, readonly=True)) as db:
        curves = db.curves()
    if not curves:
        raise TunekitError(f"{db_path}: no trials recorded")
    runs = Counter(key[:4] for key in curves)
    labelled = {}
    for (name, target, model, explorer, run), pts in curves.items():
        suffix = f" run {run[-8:]}" if runs[(name, target, model, explorer)] > 1 else ""   # several seeds of one search
        labelled[f"{name} [{target}] {model}+{explorer}{suffix}"] = pts
    if png:
        plot_curves(labelled, png)
    return [[label, str(len(pts)), f"{pts[-1][1]:.1f}"] for label, pts in labelled.items()]
