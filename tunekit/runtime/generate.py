"""Greedy decoding with a language model's key/value cache: one compiled model (symbolic
"past" and "sequence") runs the prompt and then every new token, its cache kept in
preallocated buffers that the calls read and write in place.

A model for generation takes the token ids and, per cached tensor, the past (its "past"
dimension the tokens before these, 0 for the prompt), and returns the logits and the
present (the past and the new tokens' entries), as exporters write it (transformers'
"past_key_values.{l}.key" in, "present.{l}.key" out). Compiled with `generation=True`, its
past is the leading part of its present in one buffer, and a step writes the new tokens'
entries alone: nothing of the cache is copied. Compiled without, a step reads the past from
one buffer and writes the present (the file's Concat: the cache rewritten whole) into
another, which the next step reads."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from tunekit.errors import ArgumentError
from tunekit.memory import empty
from tunekit.runtime.dims import shape as dims_shape
from tunekit.runtime.model import Model


@dataclass
class Generation:
    """What `generate` made: the new tokens and how long each took."""
    tokens: np.ndarray                 #: the new token ids, int64 [new_tokens]
    first_token_s: float               #: seconds from the call to the first new token (the prompt's run)
    token_s: list[float] = field(default_factory=list)   #: seconds of each later token (a decode step)


def cache_pairs(model: Model) -> list[tuple[str, str]]:
    """The model's (past input, present output) pairs: the names after their first "." agree
    ("past_key_values.0.key" and "present.0.key")."""
    outputs = {name.split(".", 1)[-1]: name for name in model.output_names if "." in name}
    return [(name, outputs[name.split(".", 1)[1]]) for name in model.inputs
            if "." in name and name.split(".", 1)[1] in outputs]


def generate(model: Model, prompt, new_tokens: int) -> Generation:
    """Decode `new_tokens` greedily after `prompt` (token ids, [n] or [1, n]) with `model`,
    compiled with a symbolic "past" from 0 (`dims={"past": (0, P), "sequence": (1, S)}`, best
    with `generation=True`).

    Returns:
        a Generation: the new tokens, the seconds to the first and of each later token.
    Raises:
        ArgumentError: the model is not one for generation (naming what it lacks), or the prompt
            and new tokens do not fit its ranges (naming the range and the fix).
    """
    pairs = cache_pairs(model)
    if not pairs:
        raise ArgumentError(f"the model has no key/value cache (inputs {', '.join(model.inputs)}): export it with "
                            "past_key_values.N.key inputs and present.N.key outputs (examples/transformer_nets.py "
                            "gpt2_cache)")
    ids_name, past_dim, seq_dim = _roles(model, pairs)
    prompt = np.asarray(prompt, dtype=np.int64).reshape(1, -1)
    n = prompt.shape[1]
    (lo, past_hi), (_, seq_hi) = model.dims[past_dim], model.dims[seq_dim]
    if lo > 0 or n > seq_hi or n + new_tokens - 2 > past_hi or new_tokens < 1:
        raise ArgumentError(f"{n} prompt tokens and {new_tokens} new need the model's {past_dim!r} from 0 to "
                            f"{n + new_tokens - 2} and {seq_dim!r} up to {n} (it has {lo}..{past_hi} and up to "
                            f"{seq_hi}), and at least one new token: compile it with dims={{{past_dim!r}: (0, "
                            f"{max(n + new_tokens - 2, 1)}), {seq_dim!r}: (1, {n})}}")
    logits = next(name for name in model.output_names if name not in {p for _, p in pairs})
    # per cached tensor, a buffer for the longest present: one where the past is the leading part of the
    # present (a model compiled with generation=True), else two that the steps alternate between
    buffer = {**model.plan["inputs"], **dict(model.plan["outputs"])}
    shared = [buffer[past]["buffer"] == buffer[present]["buffer"] for past, present in pairs]
    room = {name: dims_shape(model.inputs[name][0], {past_dim: n + new_tokens - 1, seq_dim: 1}) for name, _ in pairs}
    buffers = [[empty((int(np.prod(room[name])),), model.inputs[name][1]) for _ in range(1 if one else 2)]
               for (name, _), one in zip(pairs, shared)]
    tokens, times, ids, past = [], [], prompt, 0
    for _ in range(new_tokens):
        t0 = time.perf_counter()
        sizes = {past_dim: past, seq_dim: ids.shape[1]}
        grown = {**sizes, past_dim: past + ids.shape[1]}
        arrays = {}
        for (past_name, present_name), held in zip(pairs, buffers):
            arrays[past_name] = _prefix(held[0], dims_shape(model.inputs[past_name][0], sizes))
            arrays[present_name] = _prefix(held[-1], dims_shape(model.inputs[past_name][0], grown))
        outputs = model.run({ids_name: ids}, arrays)
        token = int(np.argmax(outputs[model.output_names.index(logits)][0, -1]))
        times.append(time.perf_counter() - t0)
        tokens.append(token)
        past += ids.shape[1]
        ids = np.array([[token]], np.int64)
        buffers = [held[::-1] for held in buffers]
    return Generation(np.array(tokens, np.int64), times[0], times[1:])


def _prefix(buffer: np.ndarray, shape: tuple) -> np.ndarray:
    return buffer[:int(np.prod(shape))].reshape(shape)


def _roles(model: Model, pairs: list) -> tuple[str, str, str]:
    """The token ids' input, the cache's length dimension and the new tokens' dimension."""
    cached = {p for p, _ in pairs}
    ids = [name for name, (_, dtype) in model.inputs.items() if name not in cached]
    if len(ids) != 1 or model.inputs[ids[0]][1] != "int64":
        raise ArgumentError(f"the model's inputs besides the cache are {ids}; generation gives one, the token ids "
                            "(int64 [1, sequence])")
    seq = model.inputs[ids[0]][0][-1]
    past = [d for d in model.inputs[pairs[0][0]][0] if isinstance(d, str) and d in model.dims]
    if not (isinstance(seq, str) and seq in model.dims) or len(past) != 1:
        raise ArgumentError(f"compile the model with symbolic dimensions for its token ids ({ids[0]}: "
                            f"{list(model.inputs[ids[0]][0])}) and its cache's length ({pairs[0][0]}: "
                            f"{list(model.inputs[pairs[0][0]][0])}): dims={{'past': (0, P), 'sequence': (1, S)}}")
    return ids[0], past[0], seq
