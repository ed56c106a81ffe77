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
from tunekit.plugin import manager as _plugins
from tunekit.store.database import Database

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
    tunekit.tune([{"op": "matmul", "args": SMALL, "template": "hang"}], trials=2, database=db,
                 measure={"timeout_s": 1.5, "repeat": 1, "min_repeat_ms": 0}, tuning={"batch_size": 1})
    got = rows(db)
    assert [r[1] for r in got] == ["run timeout", "run timeout"]
    assert all(r[2] == "no result within 1.5 s" for r in got)   # the kernel's deadline, not the test's clock
    with sqlite3.connect(db) as c:
        assert all(s >= 1.5 for (s,) in c.execute("SELECT run_s FROM trials"))


def test_good_template_measures_and_builds_from_history(tmp_path):
    db = str(tmp_path / "t.db")
    states = tunekit.tune([tunekit.Task("matmul", SMALL)], trials=6, database=db,
                          measure={"repeat": 2, "min_repeat_ms": 1})
    # no template named: tuned on each that serves matmul here, the task's 6 trials shared between them
    assert sorted(st.ts.template.name for st in states) == ["auto", "packed", "tiled"]
    assert sum(st.done for st in states) == 6 and all(st.best is not None for st in states)
    st = min(states, key=lambda s: s.best.cost)
    with tunekit.apply_history_best(db):
        k = tunekit.build("matmul", SMALL)   # the fastest config of either template
    assert k.tuned and k.config.index == st.best.index and k.task.template_name == st.ts.template.name
    # the kernel runs on aligned arrays silently, and says once when it is given misaligned ones
    import warnings

    import numpy as np
    a, b = (tunekit.empty((SMALL["M"], SMALL["K"])), tunekit.empty((SMALL["K"], SMALL["N"])))
    a[...], b[...] = 1.0, 2.0
    c = tunekit.empty((SMALL["M"], SMALL["N"]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        k(a, b, c)
    assert np.allclose(c, a @ b)
    shifted = np.empty(c.size + 4, np.float32)[1:][: c.size].reshape(c.shape)
    with pytest.warns(UserWarning, match=r"arguments \[2\] are not 64-byte aligned.*tunekit.empty"):
        k(a, b, shifted)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        k(a, b, shifted)    # once per kernel


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
    # a budget it cannot finish before it is killed (thousands of trials); budgets are not part of a
    # run's identity, so the rerun below resumes the same run to a budget just above what was saved
    proc = subprocess.Popen([*cmd, "--trials", "100000"], start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                if len(rows(db)) >= 6:
                    break
            except sqlite3.OperationalError:   # not created yet
                pass
            time.sleep(0.05)
        assert proc.poll() is None, f"the tuner stopped by itself: {proc.stderr.read()[-3000:]}"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)   # the tuner and its build/run workers
        proc.wait()
    before = rows(db)
    assert len(before) >= 6
    total = len(before) + 8
    subprocess.run([*cmd, "--trials", str(total)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=300)
    after = rows(db)
    assert after[: len(before)] == before                  # nothing measured was lost
    assert len(after) == total                              # the run went on to its budget
    assert len({r[0] for r in after}) == total              # and never measured a config twice
    d = Database(str(db))
    assert d.best()[0]["trials"] == total
    d.close()


def test_slow_first_run_is_timed_once_under_a_cutoff():
    from tunekit.measure.timing import execute
    from tunekit.runners import TimingPolicy
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
    out = execute(Slow(), task, None, TimingPolicy(RunSettings(repeat=3), cutoff_s=0.005))
    assert out.error is None and out.costs == [0.02] and "cutoff" in out.message
    assert Slow.runs == [1]                      # one probe run, no full timing
    out = execute(Slow(), task, None, TimingPolicy(RunSettings(repeat=3), cutoff_s=None))
    assert out.costs == [0.02] * 3 and Slow.runs == [1, 12]


def test_noisy_timings_are_redone_and_the_tightest_kept():
    from tunekit.measure.timing import execute, spread
    from tunekit.runners import TimingPolicy
    from tunekit.targets import RunSettings

    class Noisy:
        produces_output = True
        sets = [[1.0, 2.0, 1.0], [1.0, 1.3, 1.1], [1.0, 1.01, 1.02]]

        def load(self, artifact):
            return lambda a, b, c: c.__setitem__(..., a @ b)

        def run(self, artifact, args, settings):
            return Noisy.sets.pop(0)

    task = tunekit.Task("matmul", dict(M=8, N=8, K=8))
    out = execute(Noisy(), task, None, TimingPolicy(RunSettings(repeat=3), max_spread=0.05, retries=2))
    assert out.costs == [1.0, 1.01, 1.02] and spread(out.costs) < 0.05
    Noisy.sets = [[1.0, 2.0, 1.0], [1.0, 1.3, 1.1], [1.0, 1.01, 1.02]]
    out = execute(Noisy(), task, None, TimingPolicy(RunSettings(repeat=3), max_spread=0.05, retries=1))
    assert out.costs == [1.0, 1.3, 1.1]          # one retry: the tighter of the two sets


def test_kernels_are_timed_on_aligned_buffers_at_fixed_offsets():
    """numpy aligns large arrays to 16 bytes; the runner times kernels on arrays
    in one arena, each on a cache line, at the same page offsets in every process."""
    from tunekit.measure import timing
    from tunekit.memory import ALIGN
    from tunekit.runners import TimingPolicy
    from tunekit.targets import RunSettings

    seen = []

    class Target:
        produces_output = True

        def load(self, artifact):
            return lambda a, b, c: c.__setitem__(..., a @ b)

        def run(self, artifact, args, settings):
            seen.append([a.ctypes.data for a in args])
            return [1.0]

    task = tunekit.Task("matmul", dict(M=24, N=40, K=56))
    for seed in (0, 1):   # two draws of the data: two arenas
        out = timing.execute(Target(), task, None, TimingPolicy(RunSettings(repeat=1), seed=seed))
        assert out.error is None and out.costs == [1.0]
    for addrs in seen:
        assert all(a % ALIGN == 0 for a in addrs)
        assert addrs[0] % 4096 == 0
    assert [a - seen[0][0] for a in seen[0]] == [a - seen[1][0] for a in seen[1]]


def test_aligned_empty_and_arena():
    import numpy as np

    from tunekit.memory import arena, empty, misaligned
    a = empty((3, 5), "float32", align=256)
    assert a.shape == (3, 5) and a.dtype == np.float32 and a.ctypes.data % 256 == 0 and a.flags.c_contiguous
    x, y = np.arange(7, dtype=np.float64), np.ones((2, 3), np.int32)
    cx, cy = arena([x, y])
    assert np.array_equal(cx, x) and np.array_equal(cy, y) and cy.dtype == np.int32
    assert misaligned([cx, cy]) == [] and cy.ctypes.data - cx.ctypes.data == 64
    assert misaligned([np.empty(100, np.uint8)[1:], 3]) == [0]


def test_a_script_without_a_main_guard_tunes(tmp_path):
    script = tmp_path / "user.py"
    script.write_text(f"""
import tunekit
states = tunekit.tune([tunekit.Task("matmul", dict(M=32, N=32, K=32))], trials=4,
                     database={str(tmp_path / "u.db")!r}, measure={{"repeat": 1, "min_repeat_ms": 0}})
print("ERRORS", sum(st.errors for st in states), "DONE", sum(st.done for st in states))
""")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert "ERRORS 0 DONE 4" in out.stdout, out.stderr[-2000:]


def test_build_workers_extract_program_features_in_parallel():
    """The tuner's build workers lower configs for program features: the same vectors
    as in this process, in chunks across the workers; once closed, it extracts here."""
    import numpy as np

    from tunekit import features
    from tunekit.measure.build_pool import BuildPool
    from tunekit.recipe.model import Recipe
    recipe = Recipe.from_dict({"target": "x86", "tasks": [{"op": "matmul", "args": SMALL}],
                               "measure": {"build_workers": 2}}, source="test")
    ts = recipe.task_objects()[0].bind(recipe.target.create())
    indices = ts.space.sample(__import__("random").Random(0), 24)
    m = BuildPool(ts.target, recipe.measure.build_workers)
    try:
        got = m.extract(ts, indices, "relation")
        assert m._pool is not None and len(m._pool._processes) == 2
    finally:
        m.close()
    want = [features.extract(ts, i, "relation") for i in indices]
    assert all(np.array_equal(a, b) for a, b in zip(got, want)) and len(got) == len(indices)
    assert len(m.extract(ts, indices[:3], "relation")) == 3 and m._pool is None   # closed: no new workers
