"""Named workloads (see workloads.md): name -> (op name, args). Batch 1, float32."""
from __future__ import annotations

# name: (H = W input size, in channels, out channels, kernel, stride, padding) -- Table 1 of the paper
_RESNET18 = {
    "C1": (224, 3, 64, 7, 2, 3),
    "C2": (56, 64, 64, 3, 1, 1),
    "C3": (56, 64, 64, 1, 1, 0),
    "C4": (56, 64, 128, 3, 2, 1),
    "C5": (56, 64, 128, 1, 2, 0),
    "C6": (28, 128, 128, 3, 1, 1),
    "C7": (28, 128, 256, 3, 2, 1),
    "C8": (28, 128, 256, 1, 2, 0),
    "C9": (14, 256, 256, 3, 1, 1),
    "C10": (14, 256, 512, 3, 2, 1),
    "C11": (14, 256, 512, 1, 2, 0),
    "C12": (7, 512, 512, 3, 1, 1),
}

# name: (H = W input size, channels, stride) -- MobileNet v1 depthwise layers, 3x3, padding 1
_MOBILENET = {
    "D1": (112, 32, 1),
    "D2": (112, 64, 2),
    "D3": (56, 128, 1),
    "D4": (56, 128, 2),
    "D5": (28, 256, 1),
    "D6": (28, 256, 2),
    "D7": (14, 512, 1),
    "D8": (14, 512, 2),
    "D9": (7, 1024, 1),
}


def workloads() -> dict[str, tuple[str, dict]]:
    out = {"matmul-1024": ("matmul", dict(M=1024, N=1024, K=1024, dtype="float32"))}
    for name, (hw, ic, oc, k, stride, pad) in _RESNET18.items():
        out[f"resnet18.{name}"] = ("conv2d", dict(N=1, C=ic, H=hw, W=hw, K_out=oc, R=k, S=k, stride=stride,
                                                  padding=pad, dilation=1, dtype="float32"))
    for name, (hw, c, stride) in _MOBILENET.items():
        out[f"mobilenet.{name}"] = ("depthwise_conv2d", dict(N=1, C=c, H=hw, W=hw, R=3, S=3, stride=stride,
                                                             padding=1, dilation=1, dtype="float32"))
    return out
