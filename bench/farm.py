"""The device farm's cost and gain: the same batch of built kernels timed by the
local runner, by the dask runner with 1 worker and with 2 workers (each worker a
`tunekit worker` process pinned to its own core), measured in one run.

    python bench/farm.py [--quick]

- dispatch overhead: a batch of near-empty timings (1 run each), so that what is
  left is the runner's own cost; the farm's per-trial time minus the local runner's.
- trials per minute: the batch timed as tuning times it (the recipe defaults), the
  rate of each runner and the 2-worker batch time as a fraction of the 1-worker one.
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import machine_report

TASK = ("matmul", {"M": 128, "N": 128, "K": 128})


def built(n: int):
    import tunekit
    target = tunekit.registry().component("target", "x86")
    target = target(target.Options(num_threads=1))   # one core per device
    task = tunekit.Task(*TASK, template="tiled")
    ts = task.bind(target)
    indices = [i for i in range(ts.space.size) if ts.space.valid(i)][:n]
    return target, task, [target.build(ts.program(i)) for i in indices]


def batch_seconds(runner, target, task, artifacts, policy, rounds: int) -> float:
    """Median wall time of `rounds` batches (after one untimed batch: processes, inputs, references)."""
    import statistics
    runner.start(target)
    try:
        times = []
        for k in range(rounds + 1):
            t0 = time.perf_counter()
            outs = [f.result() for f in runner.submit(task, artifacts, policy)]
            bad = [o for o in outs if o.error]
            if bad:
                raise SystemExit(f"{runner.name}: {bad[0].error}: {bad[0].message}")
            if k:
                times.append(time.perf_counter() - t0)
        return statistics.median(times)
    finally:
        runner.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a batch of 8, 2 rounds (default 16, 3)")
    a = ap.parse_args()
    print(machine_report())
    # the scheduler and this client share the 2 cores with the workers here: quiet their periodic work
    os.environ.update({"DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL": "1s",
                       "DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL": "5s",
                       "DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__GIL__ENABLED": "false"})
    if shutil.which("dask") is None or shutil.which("taskset") is None:
        raise SystemExit("needs `dask` (pip install 'tunekit[distributed]') and `taskset` (util-linux)")
    from tunekit_plugins.runners.dask import DaskRunner

    import tunekit
    from tunekit.measure.local import LocalRunner
    from tunekit.runners import TimingPolicy
    n, rounds = (8, 2) if a.quick else (16, 3)
    target, task, artifacts = built(n)
    policies = {"overhead": TimingPolicy(tunekit.RunSettings(number=1, repeat=1, min_repeat_ms=0, warmup=0)),
                "tuning": TimingPolicy()}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    procs = [subprocess.Popen(["dask", "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    worker = [sys.executable, "-c", "import sys; from tunekit.cli.main import main; sys.exit(main())", "worker",
              "--scheduler", address, "--device", "core"]
    got: dict = {}
    try:
        from distributed import Client
        for label, workers in (("local", 0), ("dask, 1 worker", 1), ("dask, 2 workers", 2)):
            while len(procs) - 1 < workers:   # worker k pinned to core k
                procs.append(subprocess.Popen(["taskset", "-c", str(len(procs) - 1), *worker],
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            if workers:
                with Client(address, timeout=30) as c:
                    c.wait_for_workers(workers, timeout=60)
            for kind, policy in policies.items():
                runner = LocalRunner() if not workers else DaskRunner(DaskRunner.Options(scheduler=address,
                                                                                           device="core"))
                got[label, kind] = batch_seconds(runner, target, task, artifacts, policy, rounds)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(10)
    print(f"\n{task.name}, {n} kernels per batch, median of {rounds} batches (x86, 1 thread per kernel):")
    for label in ("local", "dask, 1 worker", "dask, 2 workers"):
        over, tun = got[label, "overhead"] / n, got[label, "tuning"]
        print(f"  {label:16s} {over * 1e3:7.1f} ms per near-empty trial; tuning-style batch {tun:6.2f} s = "
              f"{60 * n / tun:6.1f} trials per minute")
    local = got["local", "overhead"] / n
    print(f"dispatch overhead over the local runner: {(got['dask, 1 worker', 'overhead'] / n - local) * 1e3:.1f} ms "
          f"per trial (1 worker), {(got['dask, 2 workers', 'overhead'] / n - local) * 1e3:.1f} ms (2 workers, "
          "trials overlapping)")
    print(f"2 workers time a tuning batch in {got['dask, 2 workers', 'tuning'] / got['dask, 1 worker', 'tuning']:.2f}"
          f" of the time of 1; machine load now {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
