"""bench/dataset.py: the generated conv2d layers stay clear of the held-out ResNet-18 layers; the guided
trials go where they are meant to."""
from __future__ import annotations

from checks import bench_script

import tunekit

dataset = bench_script("dataset")


def _kind(args: dict) -> tuple:
    return args["C"], args["K_out"], args["R"], args["stride"][0]


def test_generated_convs_never_share_a_resnet18_layers_channels_kernel_and_stride():
    resnet = {_kind(tunekit.Task(workload=f"resnet18.C{i}").args) for i in range(1, 13)}
    tasks = dataset.conv_tasks(128)
    assert len({t.key for t in tasks}) == 128
    assert not {_kind(t.args) for t in tasks} & resnet
    assert not {t.key for t in tasks} & {key for key, _ in dataset.held_out()}
    # the kinds of layer the networks have few of are there: stems, strided 1x1s, dense 3x3s
    kinds = {(t.args["C"] == 3 and t.args["R"] == 7, t.args["R"], t.args["stride"][0]) for t in tasks}
    assert {(True, 7, 2), (False, 1, 2), (False, 3, 1), (False, 3, 2)} <= kinds
    for t in tasks:
        out = (t.args["H"] + 2 * t.args["padding"][0] - t.args["R"]) // t.args["stride"][0] + 1
        assert 5e6 <= 2 * t.args["C"] * t.args["K_out"] * t.args["R"] ** 2 * out * out <= 4e8
        assert t.template_name == "nchwc"


def test_generated_convs_are_the_same_every_time_and_a_longer_list_extends_a_shorter():
    assert [t.key for t in dataset.conv_tasks(16)] == [t.key for t in dataset.conv_tasks(128)[:16]]


def test_deep_trials_are_guided_by_the_model_and_only_on_conv2d_nchwc(tmp_path):
    import sqlite3
    db = str(tmp_path / "d.db")
    # 32 output channels: with 8 the `direct` template has one valid config where a vector is 16 lanes (AVX-512)
    conv = tunekit.Task("conv2d", dict(N=1, C=4, H=8, W=8, R=3, S=3, stride=(1, 1), padding=(1, 1), K_out=32))
    tuned = dataset.tune_all([conv], db, 2, 0, set(), deep=3)
    with sqlite3.connect(db) as c:
        rows = c.execute("select template, model, count(*) from trials group by 1, 2").fetchall()
    assert tuned == len({t for t, _, _ in rows}) >= 2   # nchwc and at least one other template
    assert ("nchwc", "xgboost", 3) in rows
    assert {(t, m, n) for t, m, n in rows if m != "random"} == {("nchwc", "xgboost", 3)}
    assert all(n == 2 for _, m, n in rows if m == "random")
