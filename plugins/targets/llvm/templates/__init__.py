"""CPU schedule templates for the LLVM targets (x86, arm-cpu), one module per op.

Every template reads the device's vector lanes, registers, cores and caches, and
constrains its space so that random configs are rarely hopeless: register tiles
that fit the register file, vector loops of whole registers, parallel loops with
work for every core, and no bounds guard inside a micro-kernel (tails are padded
or filtered out, guards stay in copy loops).
"""
from __future__ import annotations

from . import bconv, blocked, conv2d, dense, depthwise_conv2d, dots, lstm, matmul, mbconv, pool, qconv, winograd

TEMPLATES = [*matmul.TEMPLATES, *dense.TEMPLATES, *conv2d.TEMPLATES, *depthwise_conv2d.TEMPLATES, *pool.TEMPLATES,
             *blocked.TEMPLATES, *winograd.TEMPLATES, *mbconv.TEMPLATES,
             *lstm.TEMPLATES, *dots.TEMPLATES, *qconv.TEMPLATES, *bconv.TEMPLATES]
