"""The paper's five end-to-end networks (batch 1, float32) with seeded random weights, nothing downloaded:

- `resnet18_module(seed)`, `mobilenet_v2_module(seed)`: the torchvision architectures as torch.nn
  modules in eval mode, BatchNorm with non-trivial running statistics (so that folding it matters);
- `resnet18(path, size)`, `mobilenet_v2(path, size)`: ONNX files of them (opset 17, input "x"
  [1, 3, SIZE, SIZE]), exported from the module by torch.onnx.export (the TorchScript exporter,
  BatchNormalization kept as its own node) when PyTorch is installed, else written with onnx.helper: the
  same layers with the same weights (both draw them from one seeded generator in the same order), so
  either file computes the same function;
- `dqn_module(seed)`, `dcgan_module(seed)`, `lstm_lm_module(seed)` and `dqn(path)`, `dcgan(path)`,
  `lstm_lm(path)`: the Nature DQN (input "x" [1, 4, 84, 84] -> 18 action values), DCGAN's generator
  (input "z" [1, 100, 1, 1] -> a [1, 3, 64, 64] image; transposed convolutions, BatchNorm, Tanh) and the
  medium LSTM language model of Zaremba et al. (input "tokens": int64 ids [35, 1], sequence first ->
  logits [35, 1, 10000]; two LSTM layers of 650, zero initial states), exported with constant folding
  and fixed shapes; PyTorch only (no onnx.helper writer), and no SIZE;
- `inputs(net, size)`: a network's seeded graph inputs by name (what its file and module take).

Every file's output is "y".

    python examples/networks.py resnet18|mobilenet_v2 PATH [SIZE]
    python examples/networks.py dqn|dcgan|lstm_lm PATH

Importing this file needs neither PyTorch nor onnx; each function imports what it uses.
"""
from __future__ import annotations

import functools
import importlib.util
import sys

import numpy as np

# MobileNet-v2's inverted residual stages: expansion t, channels c, blocks n, first block's stride s
MOBILENET_V2_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1))
RESNET18_STAGES = ((64, 1), (128, 2), (256, 2), (512, 2))   # channels, first block's stride; two blocks each
DCGAN_CHANNELS = (512, 256, 128, 64)   # the generator's BatchNorm+ReLU layers: 4x4, 8x8, 16x16, 32x32
LSTM_LM = {"vocab": 10000, "hidden": 650, "layers": 2, "steps": 35, "init": 0.05}   # Zaremba et al.'s medium model
SIZED = ("resnet18", "mobilenet_v2")   # the nets whose input size is a parameter
NETS = (*SIZED, "dqn", "dcgan", "lstm_lm")
_FIXED_INPUTS = {"dqn": ("x", (1, 4, 84, 84)), "dcgan": ("z", (1, 100, 1, 1))}   # else "x" [1, 3, size, size]


class _Weights:
    """Seeded weights, drawn in the order the layers are defined (torch.nn's `modules()` order)."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def conv(self, cout: int, cin: int, k: int) -> np.ndarray:   # cin: per group
        return (self.rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))).astype(np.float32)

    def bn(self, c: int) -> list[np.ndarray]:   # scale, shift, running mean, running variance
        return [v.astype(np.float32) for v in (self.rng.uniform(0.5, 1.0, c), self.rng.normal(0, 0.1, c),
                                               self.rng.normal(0, 0.1, c), self.rng.uniform(0.5, 1.5, c))]

    def conv_t(self, cin: int, cout: int, k: int, stride: int) -> np.ndarray:   # ConvTranspose2d's [in, out, k, k]
        # an output pixel reads about cin * (k / stride)^2 inputs
        return (self.rng.standard_normal((cin, cout, k, k)) * np.sqrt(2.0 * stride ** 2 / (cin * k * k))).astype(
            np.float32)

    def bias(self, c: int) -> np.ndarray:
        return self.rng.normal(0, 0.01, c).astype(np.float32)

    def fc(self, cout: int, cin: int) -> list[np.ndarray]:   # weight [out, in], bias
        return [(self.rng.standard_normal((cout, cin)) * np.sqrt(1.0 / cin)).astype(np.float32), self.bias(cout)]

    def embedding(self, n: int, d: int) -> np.ndarray:   # nn.Embedding's own N(0, 1)
        return self.rng.standard_normal((n, d)).astype(np.float32)

    def uniform(self, shape, r: float) -> np.ndarray:   # Zaremba et al.'s LSTM initialisation, U(-r, r)
        return self.rng.uniform(-r, r, shape).astype(np.float32)


# --- torch.nn modules -------------------------------------------------------------------------------------------

@functools.cache
def _classes():
    """The modules' classes, defined on first use (importing this file needs no PyTorch)."""
    from torch import nn

    class ConvBN(nn.Sequential):
        """Conv (no bias, 'same' padding) + BatchNorm + an optional activation (torchvision's Conv2dNormActivation)."""
        def __init__(self, cin, cout, k, stride=1, groups=1, act=nn.ReLU):
            super().__init__(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout),
                             *([act(inplace=True)] if act else []))

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1, self.conv2 = ConvBN(cin, cout, 3, stride), ConvBN(cout, cout, 3, act=None)
            self.downsample = ConvBN(cin, cout, 1, stride, act=None) if (stride, cin) != (1, cout) else None
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x):
            y = self.conv2(self.conv1(x))
            return self.relu(y + (x if self.downsample is None else self.downsample(x)))

    class ResNet18(nn.Module):
        def __init__(self, classes=1000):
            super().__init__()
            blocks, cin = [], 64
            for cout, stride in RESNET18_STAGES:
                blocks += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
                cin = cout
            self.features = nn.Sequential(ConvBN(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1), *blocks)
            self.fc = nn.Linear(512, classes)

        def forward(self, x):
            return self.fc(nn.functional.adaptive_avg_pool2d(self.features(x), 1).flatten(1))

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, t):
            super().__init__()
            hidden = cin * t
            self.conv = nn.Sequential(*([ConvBN(cin, hidden, 1, act=nn.ReLU6)] if t != 1 else []),
                                      ConvBN(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
                                      ConvBN(hidden, cout, 1, act=None))
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.conv(x) if self.residual else self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(self, classes=1000):
            super().__init__()
            layers, cin = [ConvBN(3, 32, 3, 2, act=nn.ReLU6)], 32
            for t, c, n, s in MOBILENET_V2_STAGES:
                for i in range(n):
                    layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                    cin = c
            self.features = nn.Sequential(*layers, ConvBN(cin, 1280, 1, act=nn.ReLU6))
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))

        def forward(self, x):
            return self.classifier(nn.functional.adaptive_avg_pool2d(self.features(x), 1).flatten(1))

    class LstmLM(nn.Module):
        def __init__(self, vocab, hidden, layers):
            super().__init__()
            self.embed, self.lstm = nn.Embedding(vocab, hidden), nn.LSTM(hidden, hidden, layers)
            self.decoder = nn.Linear(hidden, vocab)

        def forward(self, tokens):   # [steps, batch] ids -> [steps, batch, vocab] logits, zero initial states
            return self.decoder(self.lstm(self.embed(tokens))[0])

    return {"resnet18": ResNet18, "mobilenet_v2": MobileNetV2, "lstm_lm": LstmLM}


def _draw(w: _Weights, m) -> list[np.ndarray]:
    """One layer's seeded parameters (then running statistics), in the order it holds them; [] for the others."""
    from torch import nn
    if isinstance(m, nn.Conv2d):
        out = [w.conv(m.out_channels, m.in_channels // m.groups, m.kernel_size[0])]
    elif isinstance(m, nn.ConvTranspose2d):
        out = [w.conv_t(m.in_channels, m.out_channels, m.kernel_size[0], m.stride[0])]
    elif isinstance(m, nn.BatchNorm2d):
        return w.bn(m.num_features)
    elif isinstance(m, nn.Linear):
        return w.fc(m.out_features, m.in_features)
    elif isinstance(m, nn.Embedding):
        return [w.embedding(m.num_embeddings, m.embedding_dim)]
    elif isinstance(m, nn.LSTM):   # per layer: weight_ih, weight_hh, bias_ih, bias_hh
        return [w.uniform(p.shape, LSTM_LM["init"]) for p in m.parameters()]
    else:
        return []
    return out + ([w.bias(m.out_channels)] if m.bias is not None else [])


def _seeded(module, seed: int):
    """Give the module's layers their seeded weights (in `modules()` order) and put it in eval mode."""
    import torch
    w = _Weights(seed)
    with torch.no_grad():
        for m in module.modules():
            stats = [m.running_mean, m.running_var] if isinstance(m, torch.nn.BatchNorm2d) else []
            for t, v in zip([*m.parameters(recurse=False), *stats], _draw(w, m), strict=True):
                t.copy_(torch.from_numpy(v))
    return module.eval()


def resnet18_module(seed: int = 0):
    """ResNet-18 (torchvision's layers: a 7x7 stem, max pooling, four stages of two basic blocks, a
    classifier) as a torch.nn.Module in eval mode, with seeded weights."""
    return _seeded(_classes()["resnet18"](), seed)


def mobilenet_v2_module(seed: int = 0):
    """MobileNet-v2 (torchvision's layers: inverted residual blocks of expand 1x1, depthwise 3x3 and
    project 1x1 convolutions, ReLU6, a classifier) as a torch.nn.Module in eval mode, with seeded weights."""
    return _seeded(_classes()["mobilenet_v2"](), seed)


def dqn_module(seed: int = 0):
    """The Nature DQN (Mnih et al. 2015: three convolutions with bias and ReLU, two fully connected layers;
    4 frames of 84x84 -> 18 action values) as a torch.nn.Module in eval mode, with seeded weights."""
    from torch import nn
    return _seeded(nn.Sequential(nn.Conv2d(4, 32, 8, 4), nn.ReLU(), nn.Conv2d(32, 64, 4, 2), nn.ReLU(),
                                 nn.Conv2d(64, 64, 3, 1), nn.ReLU(), nn.Flatten(),
                                 nn.Linear(64 * 7 * 7, 512), nn.ReLU(), nn.Linear(512, 18)), seed)


def dcgan_module(seed: int = 0):
    """DCGAN's generator (Radford et al.; the PyTorch DCGAN example): z [1, 100, 1, 1] through transposed
    convolutions (no bias) + BatchNorm + ReLU to 4x4, 8x8, 16x16, 32x32, then one to 3 channels + Tanh:
    a [1, 3, 64, 64] image. A torch.nn.Module in eval mode, with seeded weights."""
    from torch import nn
    layers, cin = [], _FIXED_INPUTS["dcgan"][1][1]
    for k, cout in enumerate(DCGAN_CHANNELS):
        layers += [nn.ConvTranspose2d(cin, cout, 4, 2 if k else 1, 1 if k else 0, bias=False), nn.BatchNorm2d(cout),
                   nn.ReLU(inplace=True)]
        cin = cout
    return _seeded(nn.Sequential(*layers, nn.ConvTranspose2d(cin, 3, 4, 2, 1, bias=False), nn.Tanh()), seed)


def lstm_lm_module(seed: int = 0):
    """The medium LSTM language model of Zaremba et al. (embedding 650, two LSTM layers of 650, a decoder
    to 10000 words; dropout off: eval): `module(tokens)`, int64 ids [35, 1] (sequence first) -> logits
    [35, 1, 10000], zero initial states. A torch.nn.Module in eval mode, with seeded weights."""
    return _seeded(_classes()["lstm_lm"](LSTM_LM["vocab"], LSTM_LM["hidden"], LSTM_LM["layers"]), seed)


def inputs(net: str, size: int = 224, seed: int = 0) -> dict[str, np.ndarray]:
    """The network's graph inputs by name, seeded: float32 N(0, 1) images / z; for lstm_lm, int64 token
    ids in [0, vocab). `size` applies to the SIZED nets only."""
    rng = np.random.default_rng(seed)
    if net == "lstm_lm":
        return {"tokens": rng.integers(0, LSTM_LM["vocab"], (LSTM_LM["steps"], 1), dtype=np.int64)}
    if net not in NETS:
        raise ValueError(f"no network {net!r}: one of {', '.join(NETS)}")
    name, shape = _FIXED_INPUTS.get(net, ("x", (1, 3, size, size)))
    return {name: rng.standard_normal(shape).astype(np.float32)}


def export(module, path: str, feeds: dict[str, np.ndarray], fold: bool = False) -> str:
    """Write `module` to `path` as ONNX (opset 17, traced on `feeds`: inputs named and shaped as they are,
    fixed shapes; output "y") with the TorchScript exporter (the dynamo one needs onnxscript). Without
    constant folding (`fold`) the exporter keeps BatchNormalization as its own node instead of folding
    it into the Conv: the file's reader folds it (with it, torch 2.13 folds it into a Conv, not into a
    ConvTranspose)."""
    import warnings

    import torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # "legacy TorchScript-based ONNX export": chosen, see above
        torch.onnx.export(module, tuple(map(torch.from_numpy, feeds.values())), path, dynamo=False,
                          opset_version=17, input_names=list(feeds), output_names=["y"], do_constant_folding=fold)
    return path


def _export_torch_only(net: str, path: str, exporter: str | None, seed: int) -> str:
    if exporter not in ("torch", None):
        raise ValueError(f"{net}: exporter {exporter!r}: only 'torch' (there is no onnx.helper writer for it)")
    if importlib.util.find_spec("torch") is None:
        raise ImportError(f"writing {net} needs PyTorch: pip install torch==2.13.0")
    return export(globals()[f"{net}_module"](seed), path, inputs(net), fold=True)


def dqn(path: str, exporter: str | None = "torch", seed: int = 0) -> str:
    """Write the Nature DQN with seeded weights to `path` as ONNX (input "x": 1x4x84x84) and return the path.
    exporter: "torch" only (torch.onnx.export of `dqn_module(seed)`, constant folding on)."""
    return _export_torch_only("dqn", path, exporter, seed)


def dcgan(path: str, exporter: str | None = "torch", seed: int = 0) -> str:
    """Write DCGAN's generator with seeded weights to `path` as ONNX (input "z": 1x100x1x1); as `dqn`."""
    return _export_torch_only("dcgan", path, exporter, seed)


def lstm_lm(path: str, exporter: str | None = "torch", seed: int = 0) -> str:
    """Write the medium LSTM language model with seeded weights to `path` as ONNX (input "tokens": int64
    [35, 1]); as `dqn`."""
    return _export_torch_only("lstm_lm", path, exporter, seed)


# --- the same networks written with onnx.helper (no PyTorch) ----------------------------------------------------

class _Onnx:
    def __init__(self, seed: int):
        self.w, self.inits, self.nodes, self.k = _Weights(seed), [], [], 0

    def const(self, value) -> str:
        from onnx import numpy_helper
        self.k += 1
        self.inits.append(numpy_helper.from_array(np.asarray(value, np.float32), f"c{self.k}"))
        return f"c{self.k}"

    def node(self, kind, ins, **attrs) -> str:
        from onnx import helper
        self.k += 1
        out = f"{kind.lower()}{self.k}"
        self.nodes.append(helper.make_node(kind, ins, [out], name=out, **attrs))
        return out

    def conv_bn(self, x, cin, cout, k, stride=1, group=1, act="relu"):
        w = self.const(self.w.conv(cout, cin // group, k))
        y = self.node("Conv", [x, w], kernel_shape=[k, k], pads=[k // 2] * 4, strides=[stride] * 2, group=group)
        y = self.node("BatchNormalization", [y, *map(self.const, self.w.bn(cout))])
        if act == "relu":
            return self.node("Relu", [y])
        if act == "relu6":
            return self.node("Clip", [y, self.const(0.0), self.const(6.0)])
        return y

    def save(self, x, cin, path, size, classes=1000) -> str:
        import onnx
        from onnx import TensorProto, helper
        y = self.node("Flatten", [self.node("GlobalAveragePool", [x])], axis=1)
        out = self.node("Gemm", [y, *map(self.const, self.w.fc(classes, cin))], transB=1)
        graph = helper.make_graph(self.nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                  [1, 3, size, size])],
                                  [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, classes])], self.inits)
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
        return path


def _resnet18_onnx(path: str, size: int, seed: int) -> str:
    n = _Onnx(seed)
    x = n.conv_bn("x", 3, 64, 7, stride=2)
    x, cin = n.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), 64
    for cout, stride in RESNET18_STAGES:
        for s in (stride, 1):
            y = n.conv_bn(n.conv_bn(x, cin, cout, 3, stride=s), cout, cout, 3, act=None)
            short = n.conv_bn(x, cin, cout, 1, stride=s, act=None) if (s, cin) != (1, cout) else x
            x, cin = n.node("Relu", [n.node("Add", [y, short])]), cout
    return n.save(x, 512, path, size)


def _mobilenet_v2_onnx(path: str, size: int, seed: int) -> str:
    n = _Onnx(seed)
    x, cin = n.conv_bn("x", 3, 32, 3, stride=2, act="relu6"), 32
    for t, c, reps, stride in MOBILENET_V2_STAGES:
        for r in range(reps):
            s, hidden = stride if r == 0 else 1, cin * t
            y = n.conv_bn(x, cin, hidden, 1, act="relu6") if t != 1 else x
            y = n.conv_bn(y, hidden, hidden, 3, stride=s, group=hidden, act="relu6")
            y = n.conv_bn(y, hidden, c, 1, act=None)
            x, cin = (n.node("Add", [x, y]) if s == 1 and cin == c else y), c
    return n.save(n.conv_bn(x, cin, 1280, 1, act="relu6"), 1280, path, size)


def _write(net: str, onnx_fn, path: str, size: int, seed: int, exporter: str | None) -> str:
    exporter = exporter or ("torch" if importlib.util.find_spec("torch") is not None else "onnx")
    if exporter == "torch":
        return export(globals()[f"{net}_module"](seed), path, inputs(net, size))
    if exporter == "onnx":
        return onnx_fn(path, size, seed)
    raise ValueError(f"exporter {exporter!r}: 'torch' or 'onnx'")


def resnet18(path: str, size: int = 224, seed: int = 0, exporter: str | None = None) -> str:
    """Write ResNet-18 with seeded weights to `path` as ONNX (input "x": 1x3xSIZExSIZE) and return the path.
    exporter: "torch" (torch.onnx.export of `resnet18_module(seed)`), "onnx" (onnx.helper, the same
    layers and weights, no PyTorch), or None: "torch" when PyTorch is installed."""
    return _write("resnet18", _resnet18_onnx, path, size, seed, exporter)


def mobilenet_v2(path: str, size: int = 224, seed: int = 0, exporter: str | None = None) -> str:
    """Write MobileNet-v2 with seeded weights to `path` as ONNX; as `resnet18`."""
    return _write("mobilenet_v2", _mobilenet_v2_onnx, path, size, seed, exporter)


if __name__ == "__main__":
    net, args = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 2 else (None, [])
    if net not in NETS or len(args) > (2 if net in SIZED else 1):
        sys.exit(f"usage: python {sys.argv[0]} {'|'.join(SIZED)} PATH [SIZE]\n"
                 f"       python {sys.argv[0]} {'|'.join(NETS[len(SIZED):])} PATH   (fixed input size: no SIZE)")
    print(globals()[net](args[0], *(int(a) for a in args[1:])))
