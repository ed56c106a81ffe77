"""Build the dataset a pretrained cost model learns from (step 20): tune the layers of the
project's networks, never ResNet-18's C1-C12 (held out for bench/search.py), with random
search (unbiased samples of each space), then export their trials.

    python bench/dataset.py [--quick] [--trials 32] [--nets mobilenet_v2,dqn,...] [--out DIR]

Tasks: every distinct task of MobileNet-v2, DQN, DCGAN, the LSTM LM, BERT and GPT-2 on each
template that serves it; every conv2d of them also in plain NCHW on every template (the large
`nchwc` space among them); MobileNet v1's depthwise layers (mobilenet.D1-D9); softmax and layer
norm of examples/computations.py. Each task is tuned alone, in its network's database under
DIR (a rerun resumes), then `tunekit dataset export` writes DIR/data.npz.
Train the model with `tunekit dataset train DIR/data.npz -o MODEL.json`.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from common import RESULTS, in_process, load_now, machine_report
from e2e import write_net

NETS = ("mobilenet_v2", "dqn", "dcgan", "lstm_lm", "bert", "gpt2")


def held_out() -> set[tuple]:
    """(task key, template) of ResNet-18's C1-C12 on every template that serves them."""
    import tunekit
    from tunekit.plugin.registry import make_component
    target = make_component("target", "x86")
    return {(v.key, v.template_name) for i in range(1, 13)
            for v in tunekit.Task(workload=f"resnet18.C{i}").variants(target)}


def net_tasks(path: str) -> list:
    """The network's distinct tasks, and its conv2d layers again in plain NCHW on the `nchwc` template."""
    import tunekit
    tasks = []
    for task, _ in tunekit.extract_tasks(path, "x86"):
        tasks.append(task)
        if task.op.name == "conv2d" and "layout" in task.args:
            plain = {k: v for k, v in task.args.items() if k not in ("layout", "data_layout")}
            tasks.append(tunekit.Task("conv2d", plain, template="nchwc"))
    return tasks


def other_tasks() -> list:
    from computations import layer_norm, softmax

    import tunekit
    tasks = [tunekit.Task(workload=f"mobilenet.D{i}") for i in range(1, 10)]
    for m, n in ((128, 768), (512, 512), (64, 3072)):
        tasks.append(tunekit.Task.from_compute(softmax, dict(M=m, N=n), name="softmax"))
        tasks.append(tunekit.Task.from_compute(layer_norm, dict(M=m, N=n), name="layer_norm"))
    return tasks


def tune_all(tasks: list, db: str, trials: int, seed: int, skip: set[tuple]) -> int:
    """Tune every (task, template) alone with random search; return how many were tuned."""
    import tunekit
    from tunekit.plugin.registry import make_component
    target = make_component("target", "x86")
    n = 0
    for task in tasks:
        for variant in task.variants(target):
            if (variant.key, variant.template_name) in skip:
                continue
            skip.add((variant.key, variant.template_name))
            tunekit.tune([variant], target="x86", model="random", explorer="random", trials=trials, seed=seed,
                         database=db, tuning={"batch_size": 8})
            n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="8 trials per task, MobileNet-v2 and DQN only")
    ap.add_argument("--trials", type=int, default=24, help="trials per task and template")
    ap.add_argument("--nets", default=",".join(NETS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(RESULTS, "dataset"))
    a = ap.parse_args()
    if a.quick:
        a.trials, a.nets = 8, "mobilenet_v2,dqn"
    os.makedirs(a.out, exist_ok=True)
    print(machine_report())
    skip = held_out()   # never tuned, so never in the dataset
    dbs = []
    for net in a.nets.split(","):
        path = os.path.join(a.out, f"{net}.onnx")
        if not os.path.exists(path):
            in_process(write_net, net, path, 224, True)
        t0 = time.monotonic()
        dbs.append(os.path.join(a.out, f"{net}.db"))
        n = tune_all(net_tasks(path), dbs[-1], a.trials, a.seed, skip)
        print(f"{net}: {n} tasks x {a.trials} trials in {time.monotonic() - t0:.0f} s", flush=True)
    t0 = time.monotonic()
    dbs.append(os.path.join(a.out, "other.db"))
    n = tune_all(other_tasks(), dbs[-1], a.trials, a.seed, skip)
    print(f"depthwise layers and computations: {n} tasks x {a.trials} trials in {time.monotonic() - t0:.0f} s")
    from tunekit.tuning.dataset import export
    data = export(dbs, os.path.join(a.out, "data.npz"))
    print(f"dataset: {len(data.seconds)} trials of {len(data.tasks)} tasks on {len(data.devices)} device(s) "
          f"-> {os.path.join(a.out, 'data.npz')}")
    print(f"machine load now {load_now()}")


if __name__ == "__main__":
    main()
