"""The dask runner on real processes on 127.0.0.1: a `dask scheduler`, `tunekit worker`s,
tuning runs spread over them; a worker killed mid-run; clear errors at start."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
from contextlib import contextmanager

import pytest

import tunekit
from tunekit.errors import TunekitError
from tunekit.ops.epilogue import has_epilogue
from tunekit.testing import plugin_registered

pytest.importorskip("distributed")
X86 = tunekit.registry().component("target", "x86")
pytestmark = [pytest.mark.skipif(shutil.which("dask") is None, reason="the `dask` command is not installed"),
              pytest.mark.skipif(X86.available() is not None, reason=f"x86 cannot run here: {X86.available()}")]

TASK = {"op": "matmul", "args": {"M": 48, "N": 48, "K": 48}, "template": "tiled"}
TARGET = {"name": "x86", "num_threads": 1}
FAST = {"repeat": 1, "number": 1, "min_repeat_ms": 1}
WORKER = [sys.executable, "-c", "import sys; from tunekit.cli.main import main; sys.exit(main())", "worker"]


def query(db: str, sql: str) -> list[tuple]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
        return c.execute(sql).fetchall()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Farm:
    """A scheduler (a trial is retried once after its worker died) and workers, as processes."""

    def __init__(self, tmp, workers: int = 2):
        self.address = f"tcp://127.0.0.1:{free_port()}"
        self.env = {**os.environ, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1"}
        self.log = open(tmp / "farm.log", "w")
        self.scheduler = self._start(["dask", "scheduler", "--host", "127.0.0.1", "--port",
                                      self.address.rsplit(":", 1)[1], "--no-dashboard"])
        self.workers = [self.worker("cpu") for _ in range(workers)]
        from distributed import Client
        with Client(self.address, timeout=30) as c:
            c.wait_for_workers(workers, timeout=60)

    def _start(self, cmd) -> subprocess.Popen:
        return subprocess.Popen(cmd, env=self.env, stdout=self.log, stderr=subprocess.STDOUT)

    def worker(self, device: str, *extra: str) -> subprocess.Popen:
        return self._start([*WORKER, "--scheduler", self.address, "--device", device, *extra])

    def facts(self) -> dict:
        """Each cpu worker's describe(): pid, trials measured, fingerprint."""
        from distributed import Client
        from tunekit_plugins.runners.dask.worker import describe
        with Client(self.address, timeout=10) as c:
            return c.run(describe, X86(X86.Options(num_threads=1)).spec())

    def close(self) -> None:
        for p in [*self.workers, self.scheduler]:
            if p.poll() is None:
                p.terminate()
        for p in [*self.workers, self.scheduler]:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        self.log.close()


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    f = Farm(tmp_path_factory.mktemp("farm"))
    yield f
    f.close()


class Pause:
    """A trial hook that holds a tuning run once it has measured `after` trials, until the
    test lets it go on: what the test does then happens mid-run, however fast the run is."""

    def __init__(self, after: int):
        self.after, self.seen = after, 0
        self.reached, self.go = threading.Event(), threading.Event()

    @tunekit.hookimpl
    def tunekit_trial_measured(self, trial):
        self.seen += 1
        if self.seen == self.after:
            self.reached.set()
            self.go.wait(300)


@contextmanager
def paused_mid_run(target, after: int = 6):
    """Run `target` (a tuning run) in a thread; yield the thread once the run has measured
    `after` trials and is held there. Leaving the block lets it go on and waits for it."""
    pause = Pause(after)
    t = threading.Thread(target=target)
    with plugin_registered(pause, "test-pause"):
        t.start()
        try:
            while not pause.reached.wait(0.1):
                assert t.is_alive(), f"the run ended before {after} trials"
            yield t
        finally:
            pause.go.set()
            t.join(300)


def runner(farm_address: str, device: str = "cpu", **more) -> dict:
    return {"runner": {"name": "dask", "scheduler": farm_address, "device": device, **more}, **FAST}


def test_a_run_is_spread_over_both_workers_and_stored_like_a_local_one(farm, tmp_path):
    db = str(tmp_path / "farm.db")
    before = {w: f["measured"] for w, f in farm.facts().items()}
    st, = tunekit.tune([TASK], target=TARGET, trials=24, database=db, tuning={"batch_size": 8},
                       measure=runner(farm.address))
    assert st.done == 24 and st.errors == 0 and st.best is not None   # every kernel checked on a worker
    facts = farm.facts()
    assert all(f["measured"] > before[w] for w, f in facts.items())   # both devices timed trials
    devices = {r[0] for r in query(db, "SELECT device FROM trials")}
    assert devices == {f["fingerprint"] for f in facts.values()}      # keyed by the workers' device
    # the same records serve a build here (this machine is the workers' device)
    with tunekit.apply_history_best(db):
        k = tunekit.build("matmul", TASK["args"], target=X86(X86.Options(num_threads=1)), template="tiled")
    assert k.tuned and k.config.index == st.best.index


def test_an_unreachable_scheduler_is_a_clear_error_at_start(tmp_path):
    address = f"tcp://127.0.0.1:{free_port()}"
    with pytest.raises(TunekitError, match=f"cannot reach the Dask scheduler at {address} within 2 s .*dask "
                                           "scheduler"):   # the runner's own deadline, not the test's clock
        tunekit.tune([TASK], target=TARGET, trials=2, database=str(tmp_path / "t.db"),
                     measure=runner(address, connect_timeout_s=2))


def test_a_device_no_worker_holds_is_a_clear_error(farm, tmp_path):
    with pytest.raises(TunekitError, match=r"no worker .* holds device 'gpu9' \(devices there: cpu\).*"
                                           r"tunekit worker --scheduler"):
        tunekit.tune([TASK], target=TARGET, trials=2, database=str(tmp_path / "t.db"),
                     measure=runner(farm.address, "gpu9"))


def test_a_worker_killed_mid_run_loses_no_trial(tmp_path):
    farm = Farm(tmp_path)
    try:
        db = str(tmp_path / "kill.db")
        result = {}

        def tune():
            result["st"] = tunekit.tune([TASK], target=TARGET, trials=40, database=db, tuning={"batch_size": 8},
                                        measure=runner(farm.address))[0]
        victim = farm.workers[0]
        with paused_mid_run(tune) as t:
            os.kill(victim.pid, signal.SIGKILL)
            assert victim.wait(60) == -signal.SIGKILL
        assert not t.is_alive()
        st = result["st"]
        assert st.done == 40 and st.errors == 0   # the killed worker's trials ran on the other one
        assert query(db, "SELECT COUNT(DISTINCT config_index) FROM trials")[0][0] == 40
    finally:
        farm.close()


def test_an_emulated_arm_worker_must_be_allowed_and_its_records_are_its_own(farm, tmp_path):
    from tunekit_plugins.targets.llvm import qemu
    if why := qemu.missing():
        pytest.skip(why)
    arm = farm.worker("arm-emu", "--target", "arm-cpu", "--emulate")
    try:
        from distributed import Client
        with Client(farm.address, timeout=10) as c:
            c.wait_for_workers(len(farm.workers) + 1, timeout=60)
        kw = dict(target="arm-cpu", trials=4, tuning={"batch_size": 4})
        with pytest.raises(TunekitError, match="emulated .*allow_emulated = true"):
            tunekit.tune([TASK], database=str(tmp_path / "no.db"), measure=runner(farm.address, "arm-emu"), **kw)
        # the packed and generated templates, with and without epilogues: the worker runs them as the local
        # runner does (test_arm_emulated tunes every template that way)
        from test_arm_emulated import arm_tasks
        tasks = [t for t in arm_tasks() if t.template_name in ("packed", "auto")]
        assert len({has_epilogue(t.args) for t in tasks}) == 2
        db = str(tmp_path / "arm.db")
        emulated_runner = runner(farm.address, "arm-emu", allow_emulated=True)
        states = tunekit.tune(tasks, database=db, **kw,
                              measure={**emulated_runner, "repeat": 2, "retries": 0, "warmup": 0, "timeout_s": 60})
        for st in states:   # aarch64 code run under qemu on the worker, checked against numpy there
            assert st.done >= 1 and all(t.ok for t in st.trials), (st.ts.task.name, [t.message for t in st.trials])
        arm_cpu = tunekit.registry().component("target", "arm-cpu")
        emulated = arm_cpu(arm_cpu.Options(emulate=True)).device().fingerprint()
        assert {r[0] for r in query(db, "SELECT device FROM trials")} == {emulated}
        assert emulated != arm_cpu().device().fingerprint()   # never a real board's best
    finally:
        arm.terminate()
        arm.wait(10)


def test_a_scheduler_lost_mid_run_stops_it_cleanly_and_the_rerun_resumes(tmp_path):
    farm = Farm(tmp_path)
    db, result = str(tmp_path / "lost.db"), {}

    def tune(address):
        try:
            result["st"] = tunekit.tune([TASK], target=TARGET, trials=40, database=db, tuning={"batch_size": 8},
                                        measure=runner(address))[0]
        except TunekitError as e:
            result["error"] = e
    try:
        with paused_mid_run(lambda: tune(farm.address)) as t:
            os.kill(farm.scheduler.pid, signal.SIGKILL)
            farm.scheduler.wait(60)
        assert not t.is_alive() and "lost the Dask scheduler" in str(result.get("error"))
    finally:
        farm.close()
    saved = query(db, "SELECT COUNT(*) FROM trials")[0][0]
    assert 6 <= saved < 40 and query(db, "SELECT COUNT(*) FROM trials WHERE error IS NOT NULL")[0][0] == 0
    again = Farm(tmp_path)
    try:
        tune(again.address)
        assert result["st"].done == 40 and len(result["st"].trials) == 40   # resumed: only the rest measured
    finally:
        again.close()
