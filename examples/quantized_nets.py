"""Quantized copies of the example networks, made with onnxruntime's own tools as a user would:
the CNNs statically (pre-processed as onnxruntime advises, which folds BatchNormalization into
the convolutions; then QDQ format, per-channel int8 weights, uint8 activations, calibrated on
seeded inputs), the transformers dynamically (`quantize_dynamic`: int8 weights, activations
quantized per run, as it writes BERT). Needs `pip install onnxruntime`.

    python examples/quantized_nets.py float.onnx int8.onnx [--calibrate resnet18 --size 224]
"""
from __future__ import annotations

import argparse
import logging
import warnings
from collections.abc import Callable


def quantize(src: str, dst: str, calibration: Callable[[int], dict] | None = None, samples: int = 8) -> str:
    """Write `src` quantized to `dst`: statically on `samples` inputs `calibration(seed)` (input name ->
    array), or dynamically without it. Returns `dst`."""
    from onnxruntime import quantization as q

    class Reader(q.CalibrationDataReader):
        def __init__(self):
            self.seeds = iter(range(1, samples + 1))   # seed 0 is the benchmark's own input

        def get_next(self):
            seed = next(self.seeds, None)
            return None if seed is None else calibration(seed)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)   # its notes on the calibration
        try:
            if calibration is None:
                q.quantize_dynamic(src, dst)
            else:
                q.quant_pre_process(src, dst)
                q.quantize_static(dst, dst, Reader(), quant_format=q.QuantFormat.QDQ, per_channel=True,
                                  activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8)
        finally:
            logging.disable(logging.NOTSET)
    return dst


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--calibrate", help="static: calibrate on this example network's seeded inputs")
    ap.add_argument("--size", type=int, default=224)
    a = ap.parse_args()
    import networks
    quantize(a.src, a.dst, a.calibrate and (lambda seed: networks.inputs(a.calibrate, a.size, seed)))
    print(a.dst)
