"""Make tiny_mobilenet_v2.onnx: a MobileNet-v2 in miniature (torchvision's blocks with tiny channel
counts: Conv-BN-ReLU6, depthwise conv, inverted residuals with and without the residual Add, a
1x1 expansion, global average pool, Linear), exported by PyTorch's TorchScript exporter
(`torch.onnx.export(..., opset_version=17, dynamo=False)`), which folds the BatchNorms into the
convs, gives each ReLU6 a Clip whose min and max are Constant nodes, and shares equal
initializers through Identity nodes (here the zero biases of the block whose BatchNorms keep
their defaults, as all do in an untrained torchvision model).

    python tests/models/make_tiny_mobilenet.py [OUT.onnx]     # needs torch (made with torch 2.13.0)
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

SHAPE = (1, 3, 16, 16)


class ConvBNReLU6(nn.Sequential):
    """torchvision's Conv2dNormActivation with ReLU6 (groups = channels: depthwise)."""

    def __init__(self, cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1):
        super().__init__(nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    """torchvision's MobileNet-v2 block: 1x1 expansion, 3x3 depthwise, 1x1 linear projection;
    the input is added back when the shapes allow."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers = [ConvBNReLU6(cin, hidden, 1)] if expand != 1 else []
        layers += [ConvBNReLU6(hidden, hidden, stride=stride, groups=hidden),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)
        self.use_res_connect = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class TinyMobileNetV2(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(ConvBNReLU6(3, 8, stride=2), InvertedResidual(8, 8, 1, 1),
                                      InvertedResidual(8, 12, 2, 4), InvertedResidual(12, 12, 1, 4),
                                      ConvBNReLU6(12, 32, 1))
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(32, classes))

    def forward(self, x):
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
        return self.classifier(torch.flatten(x, 1))


def make(path: str, seed: int = 0) -> str:
    """Export a TinyMobileNetV2 with seeded weights (and BatchNorm statistics) to `path`."""
    torch.manual_seed(seed)
    net = TinyMobileNetV2()
    untrained = set(net.features[3].modules())   # BatchNorm defaults: folded biases all zero, shared
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d) and m not in untrained:   # statistics that make folding matter
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    net.eval()
    torch.onnx.export(net, (torch.zeros(SHAPE),), path, opset_version=17, dynamo=False, input_names=["x"],
                      output_names=["y"])
    return path


if __name__ == "__main__":
    print(make(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).with_name("tiny_mobilenet_v2.onnx"))))
