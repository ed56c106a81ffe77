"""Property tests: random configs of every installed template, on random small
shapes, lowered and run in the reference interpreter, match the op's numpy
reference; config indices of huge spaces round-trip."""
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tunekit import DeviceInfo, registry, te
from tunekit.errors import ArgumentError
from tunekit.ir import interp
from tunekit.space import ConfigSpace

SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))


def small_args(op: str, blocked: bool = False):
    """A strategy of small argument dicts for `op` (in a blocked layout: channels in blocks of 2 or 4)."""
    if blocked:
        return small_args(op).flatmap(lambda a: st.sampled_from([2, 4]).flatmap(lambda b: st.fixed_dictionaries({
            **{k: st.just(v) for k, v in a.items()}, "layout": st.just(f"NCHW{b}c"), "C": st.just(a["C"] * b),
            **({"K_out": st.just(a["K_out"] * b), "data_layout": st.sampled_from([None, "NCHW"])}
               if op == "conv2d" else {})})))
    d = st.integers
    if op == "matmul":
        return st.fixed_dictionaries({"M": d(1, 12), "N": d(1, 20), "K": d(1, 9)})
    if op == "batch_matmul":
        return st.fixed_dictionaries({"B": d(1, 3), "M": d(1, 8), "N": d(1, 12), "K": d(1, 6)})
    conv = {"N": st.just(1), "C": d(1, 4), "H": d(3, 8), "W": d(3, 8), "R": d(1, 3), "S": d(1, 3),
            "stride": d(1, 2), "padding": d(0, 1), "dilation": d(1, 2)}
    if op == "conv2d":
        return st.fixed_dictionaries({**conv, "K_out": d(1, 5)})
    if op == "depthwise_conv2d":
        return st.fixed_dictionaries(conv)
    return None


def device_for(template) -> DeviceInfo:
    comps = registry().components["target"]
    families = {comps[t].obj.family if t in comps else t for t in template.targets}
    if "gpu" in families:
        return DeviceInfo("gpu", "gpu", vector_bits=128, cores=4, max_threads_per_block=1024,
                          max_shared_memory=48 << 10, warp_size=32)
    return DeviceInfo("cpu", "cpu", vector_bits=512, cores=2)


TEMPLATES = [t for t in registry().templates if small_args(t.op) is not None]


@pytest.mark.parametrize("template", TEMPLATES, ids=[f"{t.op}-{t.name}" for t in TEMPLATES])
@SETTINGS
@given(data=st.data())
def test_random_configs_match_reference(template, data):
    op = registry().op(template.op)
    try:
        args = op.canonical(data.draw(small_args(template.op, template.blocked)))
    except ArgumentError:   # e.g. a dilated kernel larger than the padded input
        assume(False)
    device = device_for(template)
    space = ConfigSpace()
    template.fn(space, device, **args)
    index = data.draw(st.integers(0, space.size - 1))
    if not space.valid(index):
        index = space.sample(__import__("random").Random(index), 1)[0]
    sched, tensors = template.fn(space.get(index), device, **args)
    program = te.lower(sched, tensors)
    rng = np.random.default_rng(index)
    inputs = op.random_inputs(args, rng)
    outs = [np.full(shape, np.nan, dtype) for shape, dtype in op.output_shapes(args)]
    interp.run(program, *inputs, *outs)
    rtol, atol = op.tolerance(args)
    for o, r in zip(outs, op.reference(*inputs, **args)):
        np.testing.assert_allclose(o, r, rtol=rtol, atol=atol, err_msg=f"config {space.get(index)}")


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_index_round_trip_in_spaces_over_2_40(data):
    s = ConfigSpace()
    for n in range(6):
        s.define_split(f"s{n}", 1 << 10, num_outputs=4)
    s.define_reorder("r", [0, 1, 2, 3])
    s.define_knob("k", list(range(7)))
    assert s.size > 2 ** 40
    i = data.draw(st.integers(0, s.size - 1))
    e = s.get(i)
    assert s.index_of(s.choices(i)) == i
    assert s.from_json(e.to_json()).index == i
