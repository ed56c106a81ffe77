"""Measurement on the real x86 target: wrong answers, hangs, kills and resumes."""
import os
import platform
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

import tunekit
from tunekit import _plugins
from tunekit.database import Database

pytest.importorskip("llvmlite")
pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="needs an x86-64 host")

SMALL = dict(M=64, N=64, K=64, dtype="float32")


@pytest.fixture
def faulty():
    import faulty_templates
    _plugins.register(faulty_templates, "faulty-templates")
    yield
    _plugins.unregister("faulty-templates")


def rows(db):
    with sqlite3.connect(db) as c:
        return c.execute("SELECT config_index, error, message, cost FROM trials ORDER BY id").fetchall()


def test_wrong_answer_is_recorded(tmp_path, faulty):
    db = str(tmp_path / "t.db")
    states = tunekit.tune([{"op": "matmul", "args": SMALL, "template": "wrong"}], trials=2, database=db,
                          measure={"repeat": 1, "min_repeat_ms": 0})
    got = rows(db)
    assert len(got) == 2 and states[0].best is None
    assert all(r[1] == "wrong answer" and "differ from the reference" in r[2] for r in got)


def test_hanging_kernel_becomes_run_timeout_and_tuning_goes_on(tmp_path, faulty):
    db = str(tmp_path / "t.db")
    t0 = time.monotonic()
    tunekit.tune([{"op": "matmul", "args": SMALL, "template": "hang"}], trials=2, database=db,
                 measure={"timeout_s": 1.5, "repeat": 1, "min_repeat_ms": 0}, tuning={"batch_size": 1})
    got = rows(db)
    assert [r[1] for r in got] == ["run timeout", "run timeout"]
    assert time.monotonic() - t0 < 30


def test_good_template_measures_and_builds_from_history(tmp_path):
    db = str(tmp_path / "t.db")
    st = tunekit.tune([tunekit.Task("matmul", SMALL)], trials=6, database=db,
                      measure={"repeat": 2, "min_repeat_ms": 1})[0]
    assert st.done == 6 and st.best is not None and st.best_gflops > 0
    with tunekit.apply_history_best(db):
        k = tunekit.build("matmul", SMALL)
    assert k.tuned and k.config.index == st.best.index


def test_kill_9_loses_nothing_and_resume_does_not_remeasure(tmp_path):
    db = tmp_path / "k.db"
    recipe = tmp_path / "r.toml"
    recipe.write_text(f"""
[target]
name = "x86"
[[tasks]]
op = "matmul"
args = {{ M = 64, N = 64, K = 64 }}
[tuning]
trials = 24
batch_size = 4
[measure]
repeat = 2
min_repeat_ms = 1
[database]
path = "{db}"
""")
    cmd = [sys.executable, "-m", "tunekit", "tune", str(recipe)]
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if len(rows(db)) >= 6:
                break
        except sqlite3.OperationalError:   # not created yet
            pass
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)   # the tuner and its build/run workers
    proc.wait()
    before = rows(db)
    assert 6 <= len(before) < 24
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    after = rows(db)
    assert after[: len(before)] == before                  # nothing measured was lost
    assert len(after) == 24                                 # the run went on to its budget
    assert len({r[0] for r in after}) == 24                 # and never measured a config twice
    d = Database(str(db))
    assert d.best()[0]["trials"] == 24
    d.close()


def test_slow_first_run_is_timed_once_under_a_cutoff():
    from tunekit._workers import execute
    from tunekit.measure import CheckSettings
    from tunekit.targets import RunSettings

    class Slow:
        """Runs take 20 ms by the target's own clock."""
        produces_output = True
        runs: list = []

        def load(self, artifact):
            return lambda a, b, c: c.__setitem__(..., a @ b)

        def run(self, artifact, args, settings):
            Slow.runs.append(settings.repeat * settings.number)
            return [0.02] * settings.repeat

    task = tunekit.Task("matmul", dict(M=8, N=8, K=8))
    out = execute(Slow(), task, None, RunSettings(repeat=3), CheckSettings(cutoff_s=0.005, quiet_ratio=0))
    assert out.error is None and out.costs == [0.02] and "cutoff" in out.message
    assert Slow.runs == [1]                      # one probe run, no full timing
    out = execute(Slow(), task, None, RunSettings(repeat=3), CheckSettings(cutoff_s=None, quiet_ratio=0))
    assert out.costs == [0.02] * 3 and Slow.runs == [1, 12]


def test_noisy_timings_are_redone_and_the_tightest_kept():
    from tunekit._workers import execute, spread
    from tunekit.measure import CheckSettings
    from tunekit.targets import RunSettings

    class Noisy:
        produces_output = True
        sets = [[1.0, 2.0, 1.0], [1.0, 1.3, 1.1], [1.0, 1.01, 1.02]]

        def load(self, artifact):
            return lambda a, b, c: c.__setitem__(..., a @ b)

        def run(self, artifact, args, settings):
            return Noisy.sets.pop(0)

    task = tunekit.Task("matmul", dict(M=8, N=8, K=8))
    out = execute(Noisy(), task, None, RunSettings(repeat=3), CheckSettings(max_spread=0.05, retries=2, quiet_ratio=0))
    assert out.costs == [1.0, 1.01, 1.02] and spread(out.costs) < 0.05
    Noisy.sets = [[1.0, 2.0, 1.0], [1.0, 1.3, 1.1], [1.0, 1.01, 1.02]]
    out = execute(Noisy(), task, None, RunSettings(repeat=3), CheckSettings(max_spread=0.05, retries=1, quiet_ratio=0))
    assert out.costs == [1.0, 1.3, 1.1]          # one retry: the tighter of the two sets


def test_timings_on_a_busy_machine_wait_and_are_redone(monkeypatch):
    from tunekit import _workers
    from tunekit.measure import CheckSettings
    from tunekit.targets import RunSettings

    class Target:
        produces_output = True
        costs = [[2.0], [1.0]]     # slowed by other load, then quiet

        def load(self, artifact):
            return lambda a, b, c: c.__setitem__(..., a @ b)

        def run(self, artifact, args, settings):
            return Target.costs.pop(0)

    # probe speeds: quiet before the first timing, busy right after it, busy, then quiet again
    speeds = [1.0, 0.6, 0.5, 0.95, 0.97]
    monkeypatch.setattr(_workers, "machine_speed", lambda: speeds.pop(0))
    monkeypatch.setattr(_workers.time, "sleep", lambda s: None)
    task = tunekit.Task("matmul", dict(M=8, N=8, K=8))
    out = _workers.execute(Target(), task, None, RunSettings(repeat=1), CheckSettings(quiet_ratio=0.85))
    assert out.costs == [1.0] and out.message == "" and not speeds    # waited, re-timed on a quiet machine

    # never quiet: timed anyway after the wait, and the trial says so
    monkeypatch.setattr(_workers, "machine_speed", lambda: 0.5)
    Target.costs = [[2.0], [2.1]]
    out = _workers.execute(Target(), task, None, RunSettings(repeat=1),
                           CheckSettings(quiet_ratio=0.85, quiet_wait_s=0, retries=1))
    assert out.costs == [2.1] and "busy machine" in out.message and "50%" in out.message


def test_a_script_without_a_main_guard_tunes(tmp_path):
    script = tmp_path / "user.py"
    script.write_text(f"""
import tunekit
st = tunekit.tune([tunekit.Task("matmul", dict(M=32, N=32, K=32))], trials=4, database={str(tmp_path / "u.db")!r},
                  measure={{"repeat": 1, "min_repeat_ms": 0}})[0]
print("ERRORS", st.errors, "DONE", st.done)
""")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert "ERRORS 0 DONE 4" in out.stdout, out.stderr[-2000:]
