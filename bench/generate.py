"""Generation: GPT-2 small exported with its key/value cache (symbolic past and sequence),
compiled once for generation (the cache appended to in place; kernels scheduled for a
decoding step and for the prompt), decoding greedily from a 32-token prompt to 64 new
tokens at batch 1: the time to the first token (the prompt's run) and the latency per later
token, against onnxruntime on the same file (its own cache loop: each run's present fed back
as the next past) and PyTorch's `generate` with its cache (the same weights, the same seed). The three must
decode the same tokens. Decoding is bound by reading the weights: the achieved bandwidth
(the matmuls' weights and the cache read per token over the latency) is set against this
machine's read bandwidth, measured in the same run. (The BERT half of step 19's figures,
one compiled model for sequences 1..384, is bench/symbolic.py.)

Each side runs in its own process, rounds alternating in rotating order, each round one
warm-up generation and one timed; the figure is the median of the rounds with their spread.

    python bench/generate.py [--quick] [--rounds 3] [--trials 8]
"""
from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from common import Timing, in_process, load_now, machine_facts, machine_report, rotate, rounds_args, write_result
from deploy_dbs import OUT

PROMPT, NEW = 32, 64
DIMS = {"past": (0, PROMPT + NEW), "sequence": (1, PROMPT)}
# kernels scheduled for decoding (few rows: the products run as dense) and for the prompt, at a cache of 64
AT = {"past": 64, "sequence": [2, PROMPT]}
MODEL = os.path.join(OUT, "gpt2_cache.onnx")


def _prompt():
    import numpy as np
    return np.random.default_rng(0).integers(0, 50257, (1, PROMPT), dtype=np.int64)


def write(path: str) -> str:
    import transformer_nets
    return transformer_nets.gpt2_cache(path, 0)


def files(trials: int) -> str:
    """The database of the decode tasks (tuned where missing)."""
    import tunekit
    if not os.path.exists(MODEL):
        in_process(write, MODEL)
    db = os.path.join(OUT, f"gpt2_generate.t{trials}.db")
    t0 = time.monotonic()
    dims = {k: v if isinstance(v, list) else [v] for k, v in AT.items()}
    states = tunekit.tune([{"model": MODEL, "dims": dims}], target="x86",
                          model="xgboost", explorer="annealing", trials=trials, database=db,
                          tuning={"batch_size": 8})
    print(f"{sum(len(s.trials) for s in states)} trials known over {len(states)} task-templates in {db} "
          f"({time.monotonic() - t0:.0f} s; a resumed run measures only what is missing)", flush=True)
    return db


def compile_and_save(db: str, out: str) -> dict:
    """Compile for DIMS at AT and save; the compile's seconds and the bytes a decode step reads."""
    import warnings

    import numpy as np

    import tunekit
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = tunekit.compile_model(MODEL, target="x86", database=db, dims=DIMS, at=AT, generation=True)
    seconds = time.perf_counter() - t0
    net.save(out)
    # the weights the products read (an embedding's table is read a row at a time, so not counted)
    read = {r["weight"]: int(np.prod(r["shape"])) * np.dtype(r["dtype"]).itemsize for c in net.plan["calls"]
            if c["op"] in ("dense", "matmul") for r in c["args"] if "weight" in r}
    weights = sum(read.values())
    cache_row = sum(int(np.prod([d for d in net.inputs[n][0] if isinstance(d, int)])) * 4
                    for n in net.inputs if "." in n)   # bytes per cached token, every layer's keys and values
    return {"compile_s": seconds, "weight_bytes": weights, "cache_bytes_per_token": cache_row}


def tunekit_side(file: str) -> dict:
    import numpy as np

    import tunekit.runtime
    from tunekit.runtime.generate import generate
    net = tunekit.runtime.load(file)
    generate(net, _prompt(), NEW)   # warm-up: the weights paged in, the calls bound
    out = generate(net, _prompt(), NEW)
    return {"first": out.first_token_s, "token": float(np.median(out.token_s)), "tokens": out.tokens.tolist()}


def ort_side(path: str) -> dict:
    import numpy as np
    import onnxruntime
    sess = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    cache = [i.name for i in sess.get_inputs() if "." in i.name]

    def run() -> dict:
        feeds = {n: np.zeros((1, 12, 0, 64), np.float32) for n in cache}
        ids, tokens, times = _prompt(), [], []
        for _ in range(NEW):
            t0 = time.perf_counter()
            logits, *present = sess.run(None, {"input_ids": ids, **feeds})
            tokens.append(int(np.argmax(logits[0, -1])))
            times.append(time.perf_counter() - t0)
            feeds, ids = dict(zip(cache, present)), np.array([[tokens[-1]]], np.int64)
        return {"first": times[0], "token": float(np.median(times[1:])), "tokens": tokens}
    run()
    return run()


def torch_side() -> dict:
    import numpy as np
    import torch
    import transformer_nets
    import transformers
    model = transformer_nets.gpt2_lm(0)
    stamps: list[float] = []

    class Stamp(transformers.LogitsProcessor):
        """Called once per new token, as its logits are ready: the times between calls are the tokens'."""

        def __call__(self, input_ids, scores):
            stamps.append(time.perf_counter())
            return scores

    def run() -> dict:
        stamps.clear()
        with torch.no_grad():
            t0 = time.perf_counter()
            out = model.generate(torch.from_numpy(_prompt()), max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False,
                                 use_cache=True, logits_processor=transformers.LogitsProcessorList([Stamp()]),
                                 pad_token_id=0)
        return {"first": stamps[0] - t0, "token": float(np.median(np.diff(stamps))),
                "tokens": out[0, PROMPT:].tolist()}
    run()
    return run()


def read_bandwidth() -> dict:
    """Bytes per second that every core together reads: each takes the largest of its share of a
    1 GiB array (numpy's vectorized max)."""
    import threading

    import numpy as np
    a = np.ones(1 << 28, np.float32)
    parts = np.array_split(a, os.cpu_count() or 1)
    out = []
    for _ in range(5):
        threads = [threading.Thread(target=p.max) for p in parts]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out.append(a.nbytes / (time.perf_counter() - t0))
    return {"first": 0.0, "token": statistics.median(out), "tokens": []}


def main() -> None:
    a = rounds_args(__doc__)
    started = time.time()
    facts = machine_facts()
    print(machine_report(facts))
    import onnxruntime
    import torch
    facts["baselines"] = [f"onnxruntime {onnxruntime.__version__} (CPU provider, default threads) on the same file, "
                          "its own cache loop", f"PyTorch {torch.__version__} generate with the cache "
                          f"({torch.get_num_threads()} threads)"]
    print("; ".join(facts["baselines"]))
    db = files(a.trials)
    saved = os.path.join(OUT, "gpt2_generate.tk")
    made = in_process(compile_and_save, db, saved)
    print(f"compile_model: {made['compile_s']:.1f} s; a decode step reads {made['weight_bytes'] / 1e6:.0f} MB of "
          f"weights and {made['cache_bytes_per_token'] / 1e3:.0f} kB of cache per cached token", flush=True)
    sides = {"tunekit": (tunekit_side, (saved,)), "onnxruntime": (ort_side, (MODEL,)), "pytorch": (torch_side, ()),
             "read bandwidth": (read_bandwidth, ())}
    rounds = rotate(sides, a.rounds)
    tokens = {k: v[-1]["tokens"] for k, v in rounds.items() if k != "read bandwidth"}
    same = all(t == tokens["onnxruntime"] for t in tokens.values())
    print(f"the same {NEW} tokens from all three: {same}" + ("" if same else f" ({tokens})"))
    first = {k: Timing([x["first"] for x in v]) for k, v in rounds.items() if k != "read bandwidth"}
    token = {k: Timing([x["token"] for x in v]) for k, v in rounds.items() if k != "read bandwidth"}
    bw = statistics.median(x["token"] for x in rounds["read bandwidth"])
    # bytes a decode step reads: the weights, and the cache at its middle length
    step_bytes = made["weight_bytes"] + made["cache_bytes_per_token"] * (PROMPT + NEW // 2)
    ms = lambda t: f"{t[0] * 1e3:.2f} ms ({t[1] * 1e3:.2f}-{t[2] * 1e3:.2f})"
    for k in token:
        print(f"{k}: first token {ms(first[k])}; per token {ms(token[k])}, {step_bytes / token[k][0] / 1e9:.1f} GB/s "
              f"({step_bytes / token[k][0] / bw:.0%} of the read bandwidth, {bw / 1e9:.1f} GB/s)")
    print(f"per token: onnxruntime / tunekit {token['onnxruntime'][0] / token['tunekit'][0]:.2f}x, "
          f"pytorch / tunekit {token['pytorch'][0] / token['tunekit'][0]:.2f}x")
    print(f"load at the end: {load_now()}")
    figures = {**made, "dims": DIMS, "at": AT, "prompt_tokens": PROMPT, "new_tokens": NEW,
               "trials_per_task": a.trials, "same_tokens": same, "read_bandwidth": bw, "step_bytes": step_bytes,
               "first_token": {k: v.as_dict() for k, v in first.items()},
               "per_token": {k: v.as_dict() for k, v in token.items()}}
    print("wrote " + write_result("generate", facts, figures, started))


if __name__ == "__main__":
    main()
