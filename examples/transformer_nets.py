"""The transformers of step 13, made here (no download): BERT-base and GPT-2 small as the
`transformers` package defines them from a config, with random weights drawn from a seed
(its own initialization under `torch.manual_seed`, biases and LayerNorm weights moved off
their initial 0 and 1), exported to ONNX by PyTorch's exporter.

    bert(path)  # BERT-base: 12 layers, hidden 768, 12 heads, intermediate 3072; inputs
                # "input_ids" and "attention_mask", int64 [1, 128]; output the last hidden state
    gpt2(path)  # GPT-2 small, prefill without a cache: input "input_ids" int64 [1, 128]
    gpt2_cache(path)  # GPT-2 small with its language-model head and key/value cache, for generation

Smaller ones for tests: `bert(path, layers=2, hidden=64, heads=4, intermediate=128, seq=16)`.
Needs `pip install torch==2.13.0 transformers onnxscript` (onnxscript: the exporter; the
TorchScript one cannot export transformers 5's attention mask, `aten::diff`).
"""
from __future__ import annotations

import numpy as np

BERT = {"layers": 12, "hidden": 768, "heads": 12, "intermediate": 3072, "seq": 128, "vocab": 30522}
GPT2 = {"layers": 12, "hidden": 768, "heads": 12, "intermediate": 3072, "seq": 128, "vocab": 50257}
SIZES = {"bert": BERT, "gpt2": GPT2}
# GPT-2 is written at opset 18: at 17 the exporter's down-conversion keeps Split's `num_outputs`
# attribute (new in 18), which makes a file that onnx's checker and onnxruntime both refuse
OPSET = {"bert": 17, "gpt2": 18}


def flops(net: str, **size) -> int:
    """Floating-point operations of one run (multiply-adds of the matmuls, attention's included, x2):
    BERT-base at 128 tokens is 22.4 GFLOP."""
    s = {**SIZES[net], **size}
    L, H, T, F = s["layers"], s["hidden"], s["seq"], s["intermediate"]
    return 2 * L * (T * H * (4 * H + 2 * F) + 2 * T * T * H)


def _module(net: str, seed: int, lm: bool = False, **size):
    import torch
    import transformers
    s = {**SIZES[net], **size}
    torch.manual_seed(seed)
    if net == "bert":
        config = transformers.BertConfig(vocab_size=s["vocab"], hidden_size=s["hidden"],
                                         num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                                         intermediate_size=s["intermediate"], max_position_embeddings=512)
        model = transformers.BertModel(config, add_pooling_layer=False)
    else:
        config = transformers.GPT2Config(vocab_size=s["vocab"], n_embd=s["hidden"], n_layer=s["layers"],
                                         n_head=s["heads"], n_inner=s["intermediate"], n_positions=1024,
                                         initializer_range=s.get("init", 0.02))
        model = (transformers.GPT2LMHeadModel if lm else transformers.GPT2Model)(config)
    with torch.no_grad():   # trained models have biases and LayerNorm weights of their own (the init's are 0 and 1)
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(0.02 * torch.randn_like(p))
    model.eval()
    if lm:
        return model

    class LastHidden(torch.nn.Module):
        """The model's last hidden state from its inputs, positionally (as the ONNX file takes them)."""

        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask=None):
            if net == "bert":
                return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            return self.model(input_ids=input_ids, use_cache=False).last_hidden_state
    return LastHidden().eval()


def bert_module(seed: int = 0, **size):
    """BERT (default: base) as a torch.nn.Module in eval mode: `module(input_ids, attention_mask)`."""
    return _module("bert", seed, **size)


def gpt2_module(seed: int = 0, **size):
    """GPT-2 (default: small) as a torch.nn.Module in eval mode: `module(input_ids)`."""
    return _module("gpt2", seed, **size)


def gpt2_lm(seed: int = 0, **size):
    """GPT-2 (default: small) with its language-model head, the transformers module (its `generate`)."""
    return _module("gpt2", seed, lm=True, **size)


def gpt2_cache(path: str, seed: int = 0, **size) -> str:
    """Write GPT-2 with its language-model head and key/value cache to `path` as ONNX, as users
    export it for generation: inputs "input_ids" int64 [1, sequence] and per layer l
    "past_key_values.{l}.key" and ".value" float32 [1, heads, past, head size]; outputs "logits"
    [1, sequence, vocab] and "present.{l}.key" and ".value" [1, heads, past + sequence, head size]
    (the past and the new keys and values). Symbolic "sequence" and "past" (0 for the prompt)."""
    import contextlib
    import io
    import warnings

    import torch
    from transformers import DynamicCache
    s = {**GPT2, **size}
    model, layers = gpt2_lm(seed, **size), s["layers"]

    class WithCache(torch.nn.Module):
        """The logits and the new cache from the token ids and the cache as tensors (as the file takes them)."""

        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, past):
            cache = DynamicCache(config=model.config)
            for layer in range(layers):
                cache.update(past[2 * layer], past[2 * layer + 1], layer)
            logits = self.model(input_ids=input_ids, past_key_values=cache, use_cache=True).logits
            return logits, *(t for layer in cache.layers for t in (layer.keys, layer.values))

    head = (1, s["heads"], 3, s["hidden"] // s["heads"])   # traced at 3 past tokens and 2 new
    past = tuple(torch.randn(head) for _ in range(2 * layers))
    ids = torch.from_numpy(inputs("gpt2", seed, **{**size, "seq": 2})["input_ids"])
    names = [f"past_key_values.{layer}.{kv}" for layer in range(layers) for kv in ("key", "value")]
    sequence, past_length = torch.export.Dim("sequence", min=1, max=1024), torch.export.Dim("past", min=0, max=1024)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(WithCache().eval(), (ids, past), path, input_names=["input_ids", *names],
                          output_names=["logits", *(n.replace("past_key_values", "present") for n in names)],
                          opset_version=OPSET["gpt2"], external_data=False, verbose=False,
                          dynamic_shapes=({1: sequence}, tuple({2: past_length} for _ in past)))
    return path


def inputs(net: str, seed: int = 0, **size) -> dict[str, np.ndarray]:
    """Seeded inputs by name: token ids in [0, vocab) and, for BERT, an attention mask of ones
    (`mask_tail` trailing zeros: padding)."""
    s = {**SIZES[net], **size}
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, s["vocab"], (1, s["seq"]), dtype=np.int64)
    if net == "gpt2":
        return {"input_ids": ids}
    mask = np.ones((1, s["seq"]), np.int64)
    mask[:, s["seq"] - s.get("mask_tail", 0):] = 0
    return {"input_ids": ids, "attention_mask": mask}


def export(net: str, path: str, seed: int = 0, dynamic: bool = False, **size) -> str:
    """Write the network to `path` as ONNX with torch.onnx.export (the dynamo exporter, weights
    inside the file), traced at the inputs' fixed shapes; `dynamic`: with symbolic dimensions, as
    users export for serving (BERT's "batch" and "sequence", GPT-2's "sequence")."""
    import contextlib
    import io
    import warnings

    import torch
    module = _module(net, seed, **size)
    feeds = {k: torch.from_numpy(v) for k, v in inputs(net, seed, **size).items()}
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):   # its progress lines
        warnings.simplefilter("ignore")
        axes = {0: "batch", 1: "sequence"} if net == "bert" else {1: "sequence"}
        torch.onnx.export(module, tuple(feeds.values()), path, input_names=list(feeds), output_names=["y"],
                          opset_version=OPSET[net], external_data=False, verbose=False,
                          dynamic_axes={k: axes for k in feeds} if dynamic else None)
    return path


def bert(path: str, seed: int = 0, **size) -> str:
    """Write BERT (default: base, 128 tokens) to `path` as ONNX (opset 17)."""
    return export("bert", path, seed, **size)


def gpt2(path: str, seed: int = 0, **size) -> str:
    """Write GPT-2 (default: small, 128 tokens) to `path` as ONNX (opset 18, see `OPSET`)."""
    return export("gpt2", path, seed, **size)
