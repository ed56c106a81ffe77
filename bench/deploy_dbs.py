"""The networks and tuned databases bench/deploy.py compiles: each network's ONNX file and
its database after `trials` trials per task, as bench/e2e.py leaves them in bench/results/e2e/
(`{tag}.onnx`, `{tag}.t{trials}.db`); what is missing is written and tuned here (xgboost +
annealing, as e2e.py tunes).

    python bench/deploy_dbs.py [--nets resnet18,mobilenet_v2,bert] [--trials 8]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import e2e
from common import in_process

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "results", "e2e")


def tag(net: str) -> str:
    return f"{net}_224" if net in e2e.SIZED else net


def network(net: str, trials: int, out: str = OUT) -> tuple[str, str]:
    """(the ONNX file, the tuned database) of `net`, written and tuned where missing."""
    import tunekit
    os.makedirs(out, exist_ok=True)
    path, db = os.path.join(out, f"{tag(net)}.onnx"), os.path.join(out, f"{tag(net)}.t{trials}.db")
    if not os.path.exists(path):
        in_process(e2e.write_net, net, path, 224, True)
    t0 = time.monotonic()
    states = tunekit.tune([{"model": path}], target="x86", model="xgboost", explorer="annealing", trials=trials,
                          database=db, tuning={"batch_size": 8})
    print(f"{net}: {sum(len(s.trials) for s in states)} trials known over {len(states)} task-templates in {db} "
          f"({time.monotonic() - t0:.0f} s; a resumed run measures only what is missing)", flush=True)
    return path, db


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nets", default="resnet18,mobilenet_v2,bert")
    ap.add_argument("--trials", type=int, default=8)
    a = ap.parse_args()
    for n in a.nets.split(","):
        network(n, a.trials)
