"""Build the dataset a pretrained cost model learns from (step 20): tune the layers of the
project's networks, never ResNet-18's C1-C12 (held out for bench/search.py), with random
search (unbiased samples of each space), then export their trials.

    python bench/dataset.py [--quick] [--trials 32] [--convs 16] [--deep 64] [--nets mobilenet_v2,...] [--out DIR]

Tasks: every distinct task of MobileNet-v2, DQN, DCGAN, the LSTM LM, BERT and GPT-2 on each
template that serves it; every conv2d of them also in plain NCHW on every template (the large
`nchwc` space among them); MobileNet v1's depthwise layers (mobilenet.D1-D9); softmax and layer
norm of examples/computations.py; `--convs` generated conv2d layers. Each task is tuned alone, in
its network's database under DIR (a rerun resumes). Then `--deep` more trials of every conv2d on
the `nchwc` template, guided by the pretrained model shipped for this CPU and fine-tuned as they
come: random samples teach a model which region of a space is good, but hardly any of them lie at
its top, which is what a new task's first batch must pick from (models trained on a few hundred
trials of some ResNet-18 layers ranked the top of the others' far better than with 24 of each:
bench/HISTORY.md).
Then `tunekit dataset export` writes DIR/data.npz.
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
from search import METHODS

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


def conv_tasks(n: int, seed: int = 0) -> list:
    """`n` generated conv2d layers on the `nchwc` template (kernels 1-7, strides 1-2, 3-512 channels,
    7-112 pixels, 5-400 MFLOP), none with the channels, kernel and stride of a ResNet-18 layer at any size:
    the kinds of layer the networks above have few of (stems, dense and strided convolutions)."""
    import random

    import tunekit
    resnet = {(t.args["C"], t.args["K_out"], t.args["R"], t.args["stride"][0])
              for t in (tunekit.Task(workload=f"resnet18.C{i}") for i in range(1, 13))}
    rng, tasks, seen = random.Random(seed), [], set()
    channels = (8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512)
    while len(tasks) < n:
        r, s = rng.choice(((1, 1), (1, 1), (1, 1), (1, 2), (1, 2), (3, 1), (3, 1), (3, 1), (3, 2), (3, 2),
                           (5, 1), (5, 2), (7, 2)))
        c = 3 if r == 7 or rng.random() < 0.05 else rng.choice(channels)
        k, hw = rng.choice(channels), rng.choice((7, 14, 28, 56, 112))
        out = (hw + 2 * (r // 2) - r) // s + 1
        flops = 2 * c * k * r * r * out * out
        if (c, k, r, s) in resnet or (c, k, r, s, hw) in seen or not 5e6 <= flops <= 4e8:
            continue
        seen.add((c, k, r, s, hw))
        tasks.append(tunekit.Task("conv2d", dict(N=1, C=c, H=hw, W=hw, R=r, S=r, stride=(s, s),
                                                 padding=(r // 2, r // 2), K_out=k), template="nchwc"))
    return tasks


#: the guided search of `--deep`: bench/search.py's pretrained method
GUIDED = METHODS["xgb-pretrained+annealing"]


def tune_all(tasks: list, db: str, trials: int, seed: int, skip: set[tuple], deep: int = 0) -> int:
    """Tune every (task, template) alone with random search, and each conv2d on `nchwc` `deep` trials more
    guided by the pretrained model (`GUIDED`); return how many (task, template) were tuned."""
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
            if deep and variant.op.name == "conv2d" and variant.template_name == "nchwc":
                tunekit.tune([variant], target="x86", model=GUIDED[0], explorer=GUIDED[1], trials=deep, seed=seed,
                             database=db, tuning={"batch_size": 8})
            n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="8 trials per task, MobileNet-v2 and DQN only")
    ap.add_argument("--trials", type=int, default=24, help="trials per task and template")
    ap.add_argument("--nets", default=",".join(NETS))
    ap.add_argument("--convs", type=int, default=16, help="generated conv2d layers (conv_tasks) to add")
    ap.add_argument("--deep", type=int, default=64, help="guided trials more of each conv2d on nchwc")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(RESULTS, "dataset"))
    a = ap.parse_args()
    if a.quick:
        a.trials, a.nets, a.convs, a.deep = 8, "mobilenet_v2,dqn", 2, 8
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
        n = tune_all(net_tasks(path), dbs[-1], a.trials, a.seed, skip, a.deep)
        print(f"{net}: {n} tasks x {a.trials} trials (conv2d on nchwc {a.deep} guided more) in "
              f"{time.monotonic() - t0:.0f} s", flush=True)
    t0 = time.monotonic()
    dbs.append(os.path.join(a.out, "other.db"))
    n = tune_all(other_tasks(), dbs[-1], a.trials, a.seed, skip)
    print(f"depthwise layers and computations: {n} tasks x {a.trials} trials in {time.monotonic() - t0:.0f} s")
    t0 = time.monotonic()
    dbs.append(os.path.join(a.out, "convs.db"))
    n = tune_all(conv_tasks(a.convs, a.seed), dbs[-1], a.trials, a.seed, skip, a.deep)
    print(f"generated conv2d layers: {n} x {a.trials} trials and {a.deep} guided in {time.monotonic() - t0:.0f} s")
    from tunekit.tuning.dataset import export
    data = export(dbs, os.path.join(a.out, "data.npz"))
    print(f"dataset: {len(data.seconds)} trials of {len(data.tasks)} tasks on {len(data.devices)} device(s) "
          f"-> {os.path.join(a.out, 'data.npz')}")
    print(f"machine load now {load_now()}")


if __name__ == "__main__":
    main()
