"""Faults: killed tuners leave no process behind, Ctrl-C is quiet, the build pool
heals itself, storage errors are one clear line, and several tuners share a database."""
from __future__ import annotations

import hashlib
import os
import platform
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

import tunekit
from tunekit.cli import main as cli
from tunekit.errors import Interrupted, StorageError
from tunekit.store.database import Database, open_log
from tunekit.store.tools import import_log, recover
from tunekit.testing import NULL_PLUGIN_NAME, null_plugin, plugin_registered

HERE = Path(__file__).parent
x86 = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="needs an x86-64 host")


def group(pgid: int) -> set[int]:
    """The live processes of process group `pgid` (from /proc): a tuner started in a session of
    its own and every process it started, including those orphaned when it was killed."""
    out = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                state, _, pgrp = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[:3]
            except (OSError, ValueError):
                continue
            if int(pgrp) == pgid and state != "Z":
                out.add(int(d))
    return out


def alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def count(db) -> int:
    try:
        with sqlite3.connect(db) as c:
            return c.execute("SELECT COUNT(*) FROM trials").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def wait_for(condition, what: str, seconds: float = 120.0) -> None:
    """Wait until `condition()` holds; the bound only turns a hang into a failure."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {seconds:g} s")
        time.sleep(0.05)


@contextmanager
def ctrl_c_as_in_a_terminal():
    """Processes started in the block get Ctrl-C as from a terminal (Python's KeyboardInterrupt),
    whatever this process inherited: a background job, nohup or a CI runner may start it with
    SIGINT ignored, which would pass through exec to the tuner and make it ignore Ctrl-C."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)   # a handler, so exec resets it
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGINT, old)


def start_tune(tmp_path):
    """`tunekit tune` in a session of its own, on a budget it cannot finish before the test stops
    it (thousands of trials); returned once it has saved 4 trials, so that it is tuning: its
    build workers, runner and the resource tracker started."""
    pytest.importorskip("llvmlite")
    db, recipe = tmp_path / "k.db", tmp_path / "r.toml"
    recipe.write_text(f'target = "x86"\n[[tasks]]\nop = "matmul"\nargs = {{ M = 64, N = 64, K = 64 }}\n'
                      f'[tuning]\ntrials = 100000\nbatch_size = 4\n[measure]\nrepeat = 2\nmin_repeat_ms = 1\n'
                      f'[database]\npath = "{db}"\n')
    with ctrl_c_as_in_a_terminal():
        proc = subprocess.Popen([sys.executable, "-m", "tunekit", "tune", str(recipe)], start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: count(db) >= 4 or proc.poll() is not None, "4 trials saved")
        assert proc.poll() is None, f"the tuner stopped by itself (exit code {proc.returncode}): " \
                                    f"{proc.stderr.read()[-3000:]}"
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return proc, db


def stopped(proc, seconds: float = 120.0) -> tuple[int, str]:
    """Wait for the tuner `proc` and then for every process of its group to end; its exit code
    and stderr (read once every writer is gone)."""
    try:
        code = proc.wait(seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"the tuner did not stop within {seconds:g} s: {proc.stderr.read()[-3000:]}")
    left = group(proc.pid)
    wait_for(lambda: not group(proc.pid), f"processes left behind by the tuner ({sorted(left)})")
    return code, proc.stderr.read()


@x86
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_tuner_leaves_no_process_behind(tmp_path, sig):
    proc, db = start_tune(tmp_path)
    assert len(group(proc.pid) - {proc.pid}) >= 2     # build workers, the runner, the resource tracker
    os.kill(proc.pid, sig)                             # the tuner only, not its group
    code, err = stopped(proc)                          # and every process it started is gone
    if sig == signal.SIGTERM:                          # stopped like Ctrl-C: one line, every trial kept
        assert code == 130 and "Traceback" not in err, err[-3000:]
        assert err.strip().splitlines()[-1].startswith("interrupted; ") and "rerun to resume" in err
        assert f"{count(db)} trials of this run saved" in err


@x86
def test_ctrl_c_in_a_terminal_is_one_quiet_line(tmp_path):
    proc, db = start_tune(tmp_path)
    os.killpg(proc.pid, signal.SIGINT)                 # what a terminal sends: the whole process group
    code, err = stopped(proc)
    assert code == 130, err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    assert [ln for ln in err.splitlines() if ln.strip() and "━" not in ln][-1].startswith("interrupted; ")
    assert f"{count(db)} trials of this run saved" in err


def test_a_ctrl_c_python_could_only_print_still_stops_the_run(tmp_path):
    """A KeyboardInterrupt raised where Python can only print it (a finalizer the garbage collector
    runs when Ctrl-C comes) still stops the run, before its next batch, with every trial kept."""
    class Finalizer:   # the Ctrl-C handler runs inside it and the interrupt goes no further
        @tunekit.hookimpl
        def tunekit_trial_measured(self, trial):
            try:
                signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
            except KeyboardInterrupt:
                pass

    with ctrl_c_as_in_a_terminal(), plugin_registered(Finalizer(), "finalizer"):
        with pytest.raises(Interrupted, match="interrupted; 4 trials of this run saved"):
            tune_null(tmp_path / "t.db", trials=8)
    assert count(tmp_path / "t.db") == 4


def test_children_start_with_ctrl_c_held_off():
    """A child started by tunekit gets no Ctrl-C while it starts (imports, for a second or more):
    SIGINT stays blocked until `init_worker` ignores it, including in the first child, whose start
    also starts the resource tracker (which unblocks SIGINT in the starting thread)."""
    status = "print([ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('SigBlk')][0])"
    code = ("import multiprocessing as mp\nfrom tunekit.measure.spawn import spawning\n"
            "ctx = mp.get_context('spawn')\nwith spawning():\n"
            f"    p = ctx.Process(target=exec, args=({status!r},))\n    p.start()\np.join()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=HERE.parent)
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout.strip(), 16) & (1 << (signal.SIGINT - 1)), out.stdout


@x86
def test_the_build_pool_replaces_dead_workers_and_finds_the_config_that_kills_them(tmp_path):
    import faulty_templates

    from tunekit.measure.build_pool import BuildPool
    tunekit.register_plugin(faulty_templates, "faulty-templates")
    try:
        target = tunekit.registry().component("target", "x86")()
        ts = tunekit.Task("matmul", {"M": 16, "N": 16, "K": 16}, template="killer").bind(target)
        pool = BuildPool(target, 2)
        try:
            first = pool.build(ts, [0, 2])
            assert all(o.error is None for o in first)
            pids = [p.pid for p in pool._pool._processes.values()]
            for pid in pids:                                   # a worker dies while idle
                os.kill(pid, signal.SIGKILL)
            wait_for(lambda: not any(alive(pid) for pid in pids), "killed workers gone")
            out = pool.build(ts, list(range(ts.space.size)))
        finally:
            pool.close()
    finally:
        tunekit.unregister_plugin("faulty-templates")
    killers = [i for i in range(ts.space.size) if ts.space.get(i)["x"] == 1]
    assert [i for i, o in enumerate(out) if o.error] == killers == [1]
    assert "killed its worker" in out[1].message


def tune_null(db, trials=8, log=None, target="null"):
    tunekit.register_plugin(null_plugin, NULL_PLUGIN_NAME)
    try:
        return tunekit.tune([{"op": "matmul", "args": {"M": 16, "N": 16, "K": 16}, "template": "null-matmul"}],
                            target=target, trials=trials, database={"path": str(db), "log": log},
                            tuning={"batch_size": 4})[0]
    finally:
        tunekit.unregister_plugin(NULL_PLUGIN_NAME)


def digest(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.mark.parametrize("damage", ["truncate", "garbage", "text"])
def test_a_damaged_database_is_one_clear_error_and_left_as_it_was(tmp_path, capsys, damage):
    db = tmp_path / "t.db"
    tune_null(db)
    data = db.read_bytes()
    db.write_bytes({"truncate": data[:1500], "garbage": b"\x13" * 100 + data[100:],
                    "text": b"not a database at all\n" * 50}[damage])
    before = digest(db)
    with pytest.raises(StorageError) as e:
        tune_null(db)
    msg = str(e.value)
    assert msg.startswith(f"{db}: ") and "integrity check" in msg and "tunekit db recover" in msg
    assert cli.main(["best", str(db)]) == 1
    err = capsys.readouterr().err
    assert f"{db}: " in err and "Traceback" not in err and "nothing was changed" in err
    assert digest(db) == before


def test_unusable_paths_are_said_before_anything_runs(tmp_path):
    with pytest.raises(StorageError, match="folder .* does not exist; create it"):
        tune_null(tmp_path / "missing" / "t.db")
    with pytest.raises(StorageError, match="cannot write"):
        tune_null("/proc/tunekit-test.db")
    with pytest.raises(StorageError, match="cannot write the log"):
        tune_null(tmp_path / "t.db", log=str(tmp_path / "no" / "log.jsonl"))
    with pytest.raises(StorageError, match="no such database"):
        Database(str(tmp_path / "absent.db"), readonly=True)


def read_everything(db: Path, index: int) -> None:
    d = Database(str(db), readonly=True)
    assert d.best()[0]["trials"] == 8
    d.close()
    assert cli.main(["best", str(db)]) == 0
    with tunekit.apply_history_best(str(db)):
        tunekit.register_plugin(null_plugin, NULL_PLUGIN_NAME)
        try:
            kernel = tunekit.build("matmul", {"M": 16, "N": 16, "K": 16}, target="null", template="null-matmul")
        finally:
            tunekit.unregister_plugin(NULL_PLUGIN_NAME)
    assert kernel.tuned and kernel.config.index == index


def test_reading_never_changes_the_database(tmp_path):
    db = tmp_path / "t.db"
    st = tune_null(db)
    before = digest(db)
    read_everything(db, st.best.index)
    assert digest(db) == before


def test_a_database_on_read_only_storage_is_readable(tmp_path):
    mnt = tmp_path / "ro"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN)")
    try:
        st = tune_null(mnt / "t.db")          # WAL mode, as a tuning run leaves it
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        read_everything(mnt / "t.db", st.best.index)
        with pytest.raises(StorageError, match="cannot write there|cannot write the database"):
            tune_null(mnt / "t.db")
    finally:
        assert subprocess.run(["umount", str(mnt)]).returncode == 0, "a file on it was left open"


def test_a_full_disk_mid_run_stops_cleanly_with_what_was_committed(tmp_path):
    db = tmp_path / "t.db"
    code = (f"import resource, signal, sys; sys.path.insert(0, {str(HERE)!r}); import test_faults as t; "
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            f"t.tune_null({str(db)!r}, trials=4); "
            "resource.setrlimit(resource.RLIMIT_FSIZE, (80000, 80000)); "
            f"t.tune_null({str(db)!r}, trials=4000)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and "StorageError" in p.stderr and "cannot write any more" in p.stderr
    assert "every trial measured before is committed" in p.stderr
    n = count(db)
    assert 4 < n < 4000                                # what was measured before the disk filled is there


def test_a_torn_log_line_is_ended_and_the_log_imports_back(tmp_path, capsys):
    db, log = tmp_path / "t.db", tmp_path / "t.jsonl"
    tune_null(db, log=str(log))
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:40])      # a writer killed mid-line
    f = open_log(str(log))
    f.write('{"next": "record"}\n')
    f.close()
    text = log.read_text().splitlines()
    assert text[-2] == lines[-1][:40] and text[-1] == '{"next": "record"}'
    assert import_log(str(log), str(tmp_path / "new.db")) == (7, 0, 2)    # the torn line and the foreign one
    assert import_log(str(log), str(tmp_path / "new.db")) == (0, 7, 2)    # importing twice adds nothing
    assert cli.main(["db", "import", str(log), str(tmp_path / "new.db")]) == 0
    assert "0 trials imported" in capsys.readouterr().out


def test_recover_copies_the_readable_rows_into_a_new_file(tmp_path):
    db = tmp_path / "t.db"
    tune_null(db, trials=64)
    with sqlite3.connect(db) as c:
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = digest(db)
    got, lost = recover(str(db), str(tmp_path / "new.db"))
    assert (got, lost) == (64, 0) and digest(db) == before
    with pytest.raises(StorageError, match="already exists"):
        recover(str(db), str(tmp_path / "new.db"))
    data = bytearray(db.read_bytes())
    data[4096 * 3: 4096 * 3 + 200] = b"\xff" * 200       # a damaged page in the middle
    db.write_bytes(bytes(data))
    got, lost = recover(str(db), str(tmp_path / "new2.db"))
    assert 0 < got < 64 or lost > 0


def test_two_tuners_on_one_database_never_measure_a_config_twice(tmp_path):
    db, measured = tmp_path / "t.db", tmp_path / "measured.txt"
    procs = [subprocess.Popen([sys.executable, str(HERE / "tune_null.py"), str(db), "24", str(measured)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        assert p.wait(300) == 0, p.stderr.read()
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT config_index, run FROM trials").fetchall()
    assert len(rows) == 24 and len({r[0] for r in rows}) == 24 and len({r[1] for r in rows}) == 1
    timed = [line.split()[1] for line in measured.read_text().splitlines()]   # what either process ran
    assert sorted(timed) == sorted(r[0] for r in rows)


def test_two_tuners_on_a_task_of_several_templates_measure_exactly_the_budget(tmp_path):
    """The budget is the run's, over all its task's templates: two processes share it exactly, with no
    config measured twice, however each splits it between the templates."""
    db, measured = tmp_path / "t.db", tmp_path / "measured.txt"
    procs = [subprocess.Popen([sys.executable, str(HERE / "tune_null.py"), str(db), "16", str(measured), "all"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        assert p.wait(300) == 0, p.stderr.read()
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT template, config_index FROM trials").fetchall()
    assert len(rows) == 16 and len(set(rows)) == 16 and len({t for t, _ in rows}) >= 3
    timed = [tuple(line.split()) for line in measured.read_text().splitlines()]
    assert sorted(timed) == sorted(rows)


def test_claims_are_per_space_and_expire_when_their_process_is_gone(tmp_path):
    from tunekit.store.database import CLAIM_TTL_S, TaskKey
    db = Database(str(tmp_path / "t.db"))
    key = TaskKey("w", "null", "dev", "tmpl")
    claim = lambda indices, space="s1", budget=8, run_budget=100: db.claim(key, "run", indices, budget, run_budget,
                                                                          space, "code")
    with db.conn:   # another host's process holds config 0 (alive: fresh) and held 1 (gone: not refreshed)
        db.conn.execute("INSERT INTO claims VALUES ('w', 'null', 'dev', 'tmpl', 's1', 'code', '0', 'run', "
                        "'elsewhere', 1, ?)", (time.time(),))
        db.conn.execute("INSERT INTO claims VALUES ('w', 'null', 'dev', 'tmpl', 's1', 'code', '1', 'run', "
                        "'elsewhere', 2, ?)", (time.time() - CLAIM_TTL_S - 1,))
    assert claim([0, 1, 2]) == ([1, 2], [0])
    assert claim([0, 3], space="s2") == ([0, 3], [])   # config 0 of another space is another config
    # a process's claim replaces its earlier ones of the task (measured by then); the live one elsewhere counts
    assert claim([4, 5, 6], budget=3) == ([4, 5], [])
    assert claim([7, 8], run_budget=2) == ([7], [])   # the run's budget, over all its tasks, too
    db.close()


def test_a_resumed_run_measures_no_config_again(tmp_path):
    db, measured = tmp_path / "t.db", tmp_path / "measured.txt"
    for trials in ("8", "16"):   # the second run resumes the first (a budget raised, as after a stop)
        subprocess.run([sys.executable, str(HERE / "tune_null.py"), str(db), trials, str(measured)], check=True,
                       stdout=subprocess.DEVNULL, timeout=300)
    timed = measured.read_text().splitlines()
    assert len(timed) == 16 and len(set(timed)) == 16


def test_a_noisy_machine_is_said_in_the_summary(tmp_path):
    from rich.console import Console

    from tunekit.tuning.progress import summary_table
    st = tune_null(tmp_path / "t.db", target={"name": "null", "noise": 0.5})
    assert st.suspect > 0 and st.retimed is not None
    out = Console(width=80, record=True, file=open(os.devnull, "w"))
    out.print(summary_table([st]))
    assert "machine busy: " in out.export_text()
