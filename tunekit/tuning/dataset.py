"""Datasets of measured programs, for cost models trained across tasks (the paper's transfer
learning, step 20): the successful trials of tuning databases, each as its lowered program's
relation features (one feature space for every op, template and size: `tunekit.features`),
with its measured seconds, its task and the device it was measured on.

A trial's features are those of its program lowered here, by this tunekit and this machine's
target: export on the CPU family that measured the records. A record of another version of a
template or of the code generator (`TaskSpace.current`) is left out, as the tuner leaves it.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass

import numpy as np

from tunekit.errors import ArgumentError, TunekitError
from tunekit.features import feature_names
from tunekit.plugin.registry import make_component, task_of
from tunekit.records import Trial
from tunekit.store.database import Database
from tunekit.task import TaskSpace, TaskSpec

#: the feature kind of a dataset: the one whose layout does not depend on the task
KIND = "relation"


@dataclass
class Dataset:
    """Measured programs of many tasks (`export` writes one, `load` reads it).

    Attributes:
        features: float32 [trials, features]: each trial's program, `KIND` features.
        seconds: float64 [trials]: its measured time (the median of its repeats).
        task: int32 [trials]: its task, an index of `tasks`.
        device: int32 [trials]: the device that measured it, an index of `devices`.
        tasks: per task {"workload", "op", "args", "template", "target", "flops"}.
        devices: the devices' fingerprints (as the databases key them).
        kind: the feature kind of `features`.
    """
    features: np.ndarray
    seconds: np.ndarray
    task: np.ndarray
    device: np.ndarray
    tasks: list[dict]
    devices: list[str]
    kind: str = KIND

    def save(self, path: str) -> None:
        """Write the dataset to `path` (.npz), as `load` reads it."""
        meta = {"kind": self.kind, "feature_names": feature_names(self.kind), "tasks": self.tasks,
                "devices": self.devices}
        with open(path, "wb") as f:
            np.savez_compressed(f, features=self.features, seconds=self.seconds, task=self.task, device=self.device,
                                meta=np.array(json.dumps(meta)))

    def gflops(self) -> np.ndarray:
        """Each trial's speed: its task's floating-point operations over its seconds, in GFLOPS."""
        flops = np.array([t["flops"] for t in self.tasks], np.float64)
        return flops[self.task] / self.seconds / 1e9


def current_trials(rows: Iterable[tuple], target, pool=None) -> Iterator[tuple[tuple, TaskSpace, Trial]]:
    """The (task, its space on `target`, the trial in that space) of database rows (`Database.history`'s
    (op, args, template, trial, computation)), the trials of other code or of ops and templates no
    longer installed left out; `pool` lowers configs for features."""
    spaces: dict = {}
    for op, args, template, trial, computation in rows:
        key = (op, json.dumps(args, sort_keys=True), template, computation)
        if key not in spaces:
            try:
                spaces[key] = task_of(TaskSpec(op, tuple(sorted(args.items())), template, computation)).bind(target,
                                                                                                              pool)
            except TunekitError:
                spaces[key] = None   # its op or template is no longer installed
        if spaces[key] is not None and (now := spaces[key].current(trial)) is not None:
            yield key, spaces[key], now


def export(databases: list[str], path: str) -> Dataset:
    """Write the successful trials of `databases` to `path` (.npz) and return them.

    Raises:
        ArgumentError: no database holds a trial this tunekit can lower (naming them).
    """
    rows_x, seconds, task, device, tasks, devices = [], [], [], [], {}, {}
    for source in databases:
        with closing(Database(source, readonly=True)) as db:
            for target_name, fingerprint in db.devices():
                target = make_component("target", target_name)
                rows = db.history(target_name, fingerprint, set(), limit=None)
                for key, space, trial in current_trials(rows, target):
                    if trial.error is not None or not trial.costs:
                        continue
                    t = tasks.setdefault((target_name, key), {
                        "index": len(tasks), "workload": space.task.key, "op": space.task.op.name,
                        "args": json.loads(key[1]), "template": key[2], "target": target_name,
                        "flops": int(space.task.flops)})
                    rows_x.append(space.features(trial.index, KIND))
                    seconds.append(trial.cost)
                    task.append(t["index"])
                    device.append(devices.setdefault(fingerprint, len(devices)))
    if not rows_x:
        raise ArgumentError(f"{', '.join(databases)}: no successful trial of an op and template this tunekit "
                            "lowers (tune some tasks first: tunekit tune RECIPE)")
    data = Dataset(np.asarray(rows_x, np.float32), np.asarray(seconds, np.float64), np.asarray(task, np.int32),
                   np.asarray(device, np.int32), [{k: v for k, v in t.items() if k != "index"} for t in tasks.values()],
                   list(devices))
    data.save(path)
    return data


def load(path: str) -> Dataset:
    """Read a dataset `export` wrote (ArgumentError: not one, naming the file)."""
    try:
        with np.load(path) as z:
            meta = json.loads(str(z["meta"]))
            if meta.get("kind") != KIND or len(meta["feature_names"]) != z["features"].shape[1]:
                raise ArgumentError(f"{path}: a dataset of other features ({meta.get('kind')}); export it again "
                                    "with this tunekit (tunekit dataset export)")
            return Dataset(z["features"], z["seconds"], z["task"], z["device"], meta["tasks"], meta["devices"])
    except (OSError, ValueError, KeyError) as e:
        raise ArgumentError(f"{path}: not a dataset of tunekit ({type(e).__name__}: {e}); write one with "
                            "tunekit dataset export DB... -o FILE.npz") from None


def train(data: str, model, output: str) -> Dataset:
    """Pretrain `model` (a CostModel) on the dataset file `data` and save it to `output`, for a
    model's `pretrained = "<output>"` (or, as `<target>-<cpu>[@<template>].json` in a folder, "<folder>")."""
    dataset = load(data)
    if len(np.unique(dataset.task)) < 2:
        raise ArgumentError(f"{data}: trials of one task only; a model that carries over to new tasks "
                            "learns from many (export more databases: tunekit dataset export DB... -o FILE)")
    model.pretrain(dataset)
    model.save(output)
    return dataset

