"""The compile plan (`tunekit.deploy.plan`): each distinct node's Task made once, each best
record read once, and a pass pipeline a user can list and turn passes off in."""
from __future__ import annotations

import warnings
from collections import Counter

import numpy as np
import pytest

import tunekit
from tunekit.cli import main as cli
from tunekit.deploy.plan import PASSES, NetworkPlan
from tunekit.errors import ArgumentError
from tunekit.plugin.registry import Registry
from tunekit.store.database import Database

pytest.importorskip("onnx")
from test_layout_search import _network, _x86_target
from test_onnx import RNG, reference


def _compiled(path, tgt, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # no records: default configs
        return tunekit.compile_model(path, target=tgt, **kw)


def test_compile_model_makes_each_distinct_task_once_and_reads_each_best_record_once(tmp_path, monkeypatch):
    tgt, path = _x86_target(), _network(tmp_path)
    db = str(tmp_path / "records.db")
    Database(db).close()
    made, reads = Counter(), Counter()
    make, read = Registry.task, Database.trials

    def counted_task(self, op=None, args=None, **kw):
        made[(op, repr(sorted((args or {}).items())), repr(sorted(kw.items())))] += 1
        return make(self, op, args, **kw)

    def counted_trials(self, key):
        reads[(key.workload, key.template)] += 1
        return read(self, key)
    monkeypatch.setattr(Registry, "task", counted_task)
    monkeypatch.setattr(Database, "trials", counted_trials)
    net = _compiled(path, tgt, database=db)   # with records: the layout search and the algorithm choice run
    assert made and reads
    assert max(made.values()) == 1, [k for k, n in made.items() if n > 1]
    assert max(reads.values()) == 1, [k for k, n in reads.items() if n > 1]
    # the layout search read the layers in the blocks they may take, and Winograd's tasks
    assert any("conv2d_winograd" in k[0] for k in made) and len(made) > len(net.graph.nodes)


def test_the_passes_are_listed_and_each_can_be_left_out(tmp_path):
    tgt, path = _x86_target(), _network(tmp_path)
    names = [p.name for p in PASSES]
    assert names == ["qdq", "epilogues", "merge-siblings", "bf16", "append-cache", "fuse-te", "dense-rows",
                     "pack-panels", "block-channels", "bf16-convs", "alternatives"]
    x = RNG.standard_normal((1, 3, 9, 11)).astype(np.float32)
    every = _compiled(path, tgt)
    plain = _compiled(path, tgt, passes=[n for n in names if n != "block-channels"])
    unfused = _compiled(path, tgt, passes=[n for n in names if n != "epilogues"])
    assert {n.args.get("layout", "NCHW") for n in every.graph.nodes} != {"NCHW"}
    assert {n.args.get("layout", "NCHW") for n in plain.graph.nodes} == {"NCHW"}   # no channel blocks
    # without epilogues each ReLU is a kernel of its own (a te computation), not the conv's output stage
    assert not [n for n in every.graph.nodes if n.computation] and [n for n in unfused.graph.nodes if n.computation]
    for net in (every, plain, unfused):
        np.testing.assert_allclose(net(x)[0], reference(path, x), rtol=1e-4, atol=1e-5)
    nchw = {t.args.get("layout", "NCHW") for t, _ in tunekit.extract_tasks(path, tgt, passes=[])}
    assert nchw == {"NCHW"}
    with pytest.raises(ArgumentError, match=r"unknown pass\(es\) blocking \(passes: qdq, epilogues, merge-siblings, "):
        NetworkPlan(tunekit.deploy.network.load_graph(path), tgt, passes=["blocking"])


def test_tunekit_run_turns_a_pass_off_and_lists_them(tmp_path, capsys):
    _x86_target()
    path = _network(tmp_path)
    assert cli.main(["run", path, "--repeat", "1"]) == 0
    assert "blocked" in capsys.readouterr().out     # the template of the blocked convs
    assert cli.main(["run", path, "--no-pass", "block-channels", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "ms per run" in out and "blocked" not in out
    assert cli.main(["run", path, "--no-pass", "blocking"]) == 1
    assert "unknown pass(es) blocking" in capsys.readouterr().err
    assert cli.main(["run", "--list-passes"]) == 0
    out = capsys.readouterr().out
    assert all(p.name in out and p.doc in out for p in PASSES)


def test_a_second_frontend_of_op_calls_compiles_through_the_same_passes(tmp_path):
    """A third party's tiny frontend: a JSON dict of op calls. Its network is blocked, packed
    and checked by the core's passes, as an ONNX model's is."""
    import json
    from types import SimpleNamespace

    from tunekit.graph import Node
    from tunekit.graph.builder import GraphBuilder
    tgt = _x86_target()
    b = tgt.network_choices().channel_block

    class DictFrontend(tunekit.Frontend):
        name, suffixes = "op-dict", (".ops",)

        def load(self, path):
            spec = json.loads(open(path).read())
            rng = np.random.default_rng(0)
            g = GraphBuilder(path, {k: rng.standard_normal(s).astype(np.float32) for k, s in spec["constants"].items()})
            for k, s in spec["inputs"].items():
                g.shapes[k], g.dtypes[k] = tuple(s), "float32"
            for n in spec["nodes"]:
                g.add(Node(n["op"], n["args"], n["inputs"], n["output"], n["output"]), tuple(n["shape"]))
            return g.graph(list(spec["inputs"]), spec["outputs"])

    conv = dict(N=1, C=3, H=8, W=8, K_out=2 * b, R=3, S=3, padding=(1, 1), dtype="float32")
    pool = dict(N=1, C=2 * b, H=8, W=8, dtype="float32")
    spec = {"inputs": {"x": [1, 3, 8, 8]}, "constants": {"w": [2 * b, 3, 3, 3]},
            "nodes": [{"op": "conv2d", "args": conv, "inputs": ["x", "w"], "output": "c", "shape": [1, 2 * b, 8, 8]},
                      {"op": "global_avg_pool2d", "args": pool, "inputs": ["c"], "output": "y",
                       "shape": [1, 2 * b, 1, 1]}],
            "outputs": ["y"]}
    (tmp_path / "net.ops").write_text(json.dumps(spec))
    tunekit.register_plugin(SimpleNamespace(tunekit_frontends=tunekit.hookimpl(lambda: [DictFrontend])), "op-dict")
    try:
        net = _compiled(str(tmp_path / "net.ops"), tgt)
        graph = DictFrontend().load(str(tmp_path / "net.ops"))
    finally:
        tunekit.unregister_plugin("op-dict")
    assert [n.args.get("layout") for n in net.graph.nodes] == [f"NCHW{b}c", f"NCHW{b}c"]   # blocked by the pass
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    w = graph.constants["w"]
    op = tunekit.registry().op("conv2d")
    ref = op.reference(x, w, **op.canonical(conv))[0].mean(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(net(x)[0], ref, rtol=1e-4, atol=1e-5)
