"""A downstream compiler's use of tunekit: tune an op, then build it from the records.

    python examples/downstream.py
"""
import numpy as np

import tunekit

args = dict(M=256, N=256, K=256, dtype="float32")
tunekit.tune([tunekit.Task("matmul", args)], target="x86", model="random", explorer="random",
             trials=16, database="downstream.db")
with tunekit.apply_history_best("downstream.db"):
    kernel = tunekit.build("matmul", args, target="x86")
A, B, C = (tunekit.empty((256, 256), "float32") for _ in range(3))   # 64-byte aligned: full speed
A[...] = np.random.rand(256, 256)
B[...] = np.random.rand(256, 256)
kernel(A, B, C)
print(kernel, "max error vs numpy:", float(np.abs(C - A @ B).max()))
