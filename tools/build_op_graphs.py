"""Build the training op graphs that TicTac's iteration model reads (``envs/sim/data/opgraphs``).

    python tools/build_op_graphs.py            # rewrite every graph
    python tools/build_op_graphs.py --check    # rebuild in memory, fail if a file differs

Each model is a compact PyTorch definition written here (no torchvision), traced with
``torch.fx`` on the ``meta`` device (shapes only, no weights allocated) and turned into a
worker DAG of one training iteration, the DAG TicTac orders:

- one **recv** op per trainable parameter tensor (its size = numel; the simulator scales
  sizes so that they add up to the profile's model size);
- one **forward** op per traced module/function call that does work, depending on the ops
  that produce its inputs and on the recvs of the parameters it reads; view-like calls
  (``flatten``, ``view``, ``getitem``, ``chunk``, ...) are contracted away;
- a ``loss`` op after every model output;
- one **backward** op per forward op, depending on the backward ops of the forward op's
  consumers (the reversed forward graph), the ops feeding the loss depending on ``loss``.

Op weights (the time oracle): :func:`_fw_cost`.  Only this tool imports torch; the simulator
core loads the JSON with the standard library.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn
from torch.fx.passes.shape_prop import ShapeProp, TensorMetadata

OUT = Path(__file__).resolve().parents[1] / "envs" / "sim" / "data" / "opgraphs"
VIEW_FUNCS = {"flatten", "view", "reshape", "getitem", "chunk", "size", "contiguous", "squeeze"}


# ----------------------------------------------------------------------------- architectures
def vgg16() -> nn.Module:
    """VGG-16 (configuration D of Simonyan & Zisserman), 224x224 input, 1000 classes."""
    layers: list[nn.Module] = []
    c = 3
    for v in (
        64,
        64,
        "M",
        128,
        128,
        "M",
        256,
        256,
        256,
        "M",
        512,
        512,
        512,
        "M",
        512,
        512,
        512,
        "M",
    ):
        if v == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [nn.Conv2d(c, int(v), 3, padding=1), nn.ReLU(inplace=True)]
            c = int(v)
    return nn.Sequential(
        *layers,
        nn.Flatten(),
        nn.Linear(512 * 7 * 7, 4096),
        nn.ReLU(inplace=True),
        nn.Dropout(),
        nn.Linear(4096, 4096),
        nn.ReLU(inplace=True),
        nn.Dropout(),
        nn.Linear(4096, 1000),
    )


class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        out = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.down: nn.Module | None = None
        if stride != 1 or cin != out:
            self.down = nn.Sequential(
                nn.Conv2d(cin, out, 1, stride, bias=False), nn.BatchNorm2d(out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + (x if self.down is None else self.down(x)))


def resnet50() -> nn.Module:
    """ResNet-50 v1 (He et al.), bottleneck stages [3, 4, 6, 3], 224x224 input."""
    blocks: list[nn.Module] = []
    cin = 64
    for width, n, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(n):
            blocks.append(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = width * 4
    return nn.Sequential(
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
        *blocks,
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(2048, 1000),
    )


class Conv(nn.Module):
    """Inception's conv (no bias) + BatchNorm + ReLU."""

    def __init__(self, cin: int, cout: int, k: Any, s: int = 1, p: Any = 0) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, s, p, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=0.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)))


def _seq(*mods: nn.Module) -> nn.Sequential:
    return nn.Sequential(*mods)


class InceptionA(nn.Module):
    def __init__(self, cin: int, pool: int) -> None:
        super().__init__()
        self.b1 = Conv(cin, 64, 1)
        self.b5 = _seq(Conv(cin, 48, 1), Conv(48, 64, 5, p=2))
        self.b3 = _seq(Conv(cin, 64, 1), Conv(64, 96, 3, p=1), Conv(96, 96, 3, p=1))
        self.bp = Conv(cin, pool, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.bp(F.avg_pool2d(x, 3, 1, 1))
        return torch.cat([self.b1(x), self.b5(x), self.b3(x), p], 1)


class InceptionB(nn.Module):
    def __init__(self, cin: int) -> None:
        super().__init__()
        self.b3 = Conv(cin, 384, 3, 2)
        self.bd = _seq(Conv(cin, 64, 1), Conv(64, 96, 3, p=1), Conv(96, 96, 3, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b3(x), self.bd(x), F.max_pool2d(x, 3, 2)], 1)


class InceptionC(nn.Module):
    def __init__(self, cin: int, c7: int) -> None:
        super().__init__()
        self.b1 = Conv(cin, 192, 1)
        self.b7 = _seq(
            Conv(cin, c7, 1), Conv(c7, c7, (1, 7), p=(0, 3)), Conv(c7, 192, (7, 1), p=(3, 0))
        )
        self.bd = _seq(
            Conv(cin, c7, 1),
            Conv(c7, c7, (7, 1), p=(3, 0)),
            Conv(c7, c7, (1, 7), p=(0, 3)),
            Conv(c7, c7, (7, 1), p=(3, 0)),
            Conv(c7, 192, (1, 7), p=(0, 3)),
        )
        self.bp = Conv(cin, 192, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.bp(F.avg_pool2d(x, 3, 1, 1))
        return torch.cat([self.b1(x), self.b7(x), self.bd(x), p], 1)


class InceptionD(nn.Module):
    def __init__(self, cin: int) -> None:
        super().__init__()
        self.b3 = _seq(Conv(cin, 192, 1), Conv(192, 320, 3, 2))
        self.b7 = _seq(
            Conv(cin, 192, 1),
            Conv(192, 192, (1, 7), p=(0, 3)),
            Conv(192, 192, (7, 1), p=(3, 0)),
            Conv(192, 192, 3, 2),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b3(x), self.b7(x), F.max_pool2d(x, 3, 2)], 1)


class InceptionE(nn.Module):
    def __init__(self, cin: int) -> None:
        super().__init__()
        self.b1 = Conv(cin, 320, 1)
        self.b3 = Conv(cin, 384, 1)
        self.b3a = Conv(384, 384, (1, 3), p=(0, 1))
        self.b3b = Conv(384, 384, (3, 1), p=(1, 0))
        self.bd = _seq(Conv(cin, 448, 1), Conv(448, 384, 3, p=1))
        self.bda = Conv(384, 384, (1, 3), p=(0, 1))
        self.bdb = Conv(384, 384, (3, 1), p=(1, 0))
        self.bp = Conv(cin, 192, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.b3(x)
        z = self.bd(x)
        p = self.bp(F.avg_pool2d(x, 3, 1, 1))
        return torch.cat([self.b1(x), self.b3a(y), self.b3b(y), self.bda(z), self.bdb(z), p], 1)


class InceptionV3(nn.Module):
    """Inception-v3 (Szegedy et al. 2016) with its auxiliary classifier (used in training),
    299x299 input, 1000 classes."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = _seq(
            Conv(3, 32, 3, 2),
            Conv(32, 32, 3),
            Conv(32, 64, 3, p=1),
            nn.MaxPool2d(3, 2),
            Conv(64, 80, 1),
            Conv(80, 192, 3),
            nn.MaxPool2d(3, 2),
        )
        self.mixed5 = _seq(InceptionA(192, 32), InceptionA(256, 64), InceptionA(288, 64))
        self.mixed6 = _seq(
            InceptionB(288),
            InceptionC(768, 128),
            InceptionC(768, 160),
            InceptionC(768, 160),
            InceptionC(768, 192),
        )
        self.aux_conv = _seq(nn.AvgPool2d(5, 3), Conv(768, 128, 1), Conv(128, 768, 5))
        self.aux_fc = nn.Linear(768, 1000)
        self.mixed7 = _seq(InceptionD(768), InceptionE(1280), InceptionE(2048))
        self.fc = nn.Linear(2048, 1000)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.mixed6(self.mixed5(self.stem(x)))
        aux = self.aux_fc(torch.flatten(F.adaptive_avg_pool2d(self.aux_conv(x), 1), 1))
        x = F.dropout(F.adaptive_avg_pool2d(self.mixed7(x), 1), 0.5, self.training)
        return self.fc(torch.flatten(x, 1)), aux


class LSTMLM(nn.Module):
    """Zaremba et al.'s "large" PTB language model: 2 LSTM layers of 1500 units, 10,000-word
    vocabulary, unrolled over 35 steps (each step's gate matmuls are separate ops)."""

    def __init__(self, vocab: int = 10000, hidden: int = 1500, layers: int = 2, steps: int = 35):
        super().__init__()
        self.steps, self.hidden = steps, hidden
        self.embed = nn.Embedding(vocab, hidden)
        self.ih = nn.ModuleList(nn.Linear(hidden, 4 * hidden) for _ in range(layers))
        self.hh = nn.ModuleList(nn.Linear(hidden, 4 * hidden) for _ in range(layers))
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        hs = [h0 for _ in self.ih]
        cs = [h0 for _ in self.ih]
        outs = []
        for t in range(self.steps):
            y = x[:, t]
            for k, (ih, hh) in enumerate(zip(self.ih, self.hh, strict=True)):
                i, f, g, o = (ih(y) + hh(hs[k])).chunk(4, 1)
                cs[k] = torch.sigmoid(f) * cs[k] + torch.sigmoid(i) * torch.tanh(g)
                hs[k] = torch.sigmoid(o) * torch.tanh(cs[k])
                y = hs[k]
            outs.append(self.decoder(y))
        return torch.stack(outs, 1)


#: name -> (builder, example inputs on the meta device, where the architecture comes from)
MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[], tuple[torch.Tensor, ...]], str]] = {
    "vgg16": (vgg16, lambda: (torch.empty(1, 3, 224, 224),), "Simonyan & Zisserman 2015, D"),
    "resnet50": (resnet50, lambda: (torch.empty(1, 3, 224, 224),), "He et al. 2016, v1"),
    "inception-v3": (
        InceptionV3,
        lambda: (torch.empty(2, 3, 299, 299),),
        "Szegedy et al. 2016, with the auxiliary classifier",
    ),
    "lstm": (
        LSTMLM,
        lambda: (torch.zeros(1, 35, dtype=torch.long), torch.empty(1, 1500)),
        "Zaremba et al. 2014, PTB large",
    ),
}


# ----------------------------------------------------------------------------- tracing
def _numel(meta: Any) -> int:
    if meta is None:
        return 0
    if isinstance(meta, TensorMetadata):
        return math.prod(meta.shape)
    if isinstance(meta, (tuple, list)):
        return sum(_numel(m) for m in meta)
    return 0


def _fw_cost(gm: fx.GraphModule, node: fx.Node) -> tuple[float, bool]:
    """(forward FLOPs, whether the op has parameters) of one traced node.

    Time oracle (relative weights; the simulator scales the forward ops to the profile's forward
    time and the backward ops to its backward time): a forward op weighs its FLOPs (a
    multiply-add counts 2: conv ``2 Cout Hout Wout Cin/g kh kw``, linear ``2 in out`` per row),
    BatchNorm 4 per element, and every other op one per output element (memory-bound work); a
    backward op weighs twice its forward op's FLOPs when the op has parameters (gradients of the
    input and of the weights) and once otherwise.
    """
    out = _numel(node.meta.get("tensor_meta"))
    if node.op == "call_module":
        mod = gm.get_submodule(str(node.target))
        if isinstance(mod, nn.Conv2d):
            kh, kw = mod.kernel_size
            return 2.0 * out * (mod.in_channels // mod.groups) * kh * kw, True
        if isinstance(mod, nn.Linear):
            return 2.0 * out * mod.in_features, True
        if isinstance(mod, nn.BatchNorm2d):
            return 4.0 * out, True
        if isinstance(mod, (nn.MaxPool2d, nn.AvgPool2d)):
            k = mod.kernel_size
            kk = k * k if isinstance(k, int) else math.prod(k)
            return float(out * kk), False
        return float(out), any(True for _ in mod.parameters(recurse=False))
    if node.target in (F.max_pool2d, F.avg_pool2d):
        ks: Any = node.args[1] if len(node.args) > 1 else node.kwargs["kernel_size"]
        return float(out * (ks * ks if isinstance(ks, int) else math.prod(ks))), False
    if node.target is F.adaptive_avg_pool2d:
        return float(_numel(node.args[0].meta.get("tensor_meta"))), False  # type: ignore[union-attr]
    return float(out), False


def _is_view(node: fx.Node) -> bool:
    if node.op == "call_module":
        owner = node.graph.owning_module
        assert owner is not None
        return isinstance(owner.get_submodule(str(node.target)), nn.Flatten)
    name = getattr(node.target, "__name__", str(node.target))
    return name in VIEW_FUNCS


def trace(name: str) -> dict[str, Any]:
    build, inputs, source = MODELS[name]
    with torch.device("meta"):
        model = build()
        args = inputs()
    model.train()
    gm = fx.symbolic_trace(model)
    ShapeProp(gm).propagate(*args)
    params = dict(gm.named_parameters())
    recv_id = {pname: i for i, pname in enumerate(params)}
    recvs = [[pname, int(p.numel())] for pname, p in params.items()]
    R = len(recvs)

    ops: list[list[Any]] = []  # [name, phase, weight, deps]
    produced: dict[fx.Node, set[int]] = {}  # fx node -> node ids providing its value
    users: dict[int, list[int]] = {}  # forward op id -> forward op ids reading it
    fw_params: dict[int, bool] = {}
    outputs: set[int] = set()
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            produced[node] = set()
            continue
        inputs_of: set[int] = set()
        for a in node.all_input_nodes:
            inputs_of |= produced[a]
        if node.op == "output":
            outputs = inputs_of
            continue
        if node.op == "get_attr":
            produced[node] = {recv_id[str(node.target)]} if str(node.target) in recv_id else set()
            continue
        if _is_view(node):
            produced[node] = inputs_of
            continue
        deps = set(inputs_of)
        if node.op == "call_module":
            prefix = f"{node.target}."
            deps |= {
                recv_id[p] for p in recv_id if p.startswith(prefix) and "." not in p[len(prefix) :]
            }
        cost, has_params = _fw_cost(gm, node)
        oid = R + len(ops)
        ops.append([str(node.name), "f", cost, sorted(deps)])
        fw_params[oid] = has_params
        for d in inputs_of:
            if d >= R:
                users.setdefault(d, []).append(oid)
        produced[node] = {oid}
    n_fw = len(ops)
    loss = R + n_fw
    ops.append(
        [
            "loss",
            "f",
            float(
                sum(_numel(o.meta.get("tensor_meta")) for o in gm.graph.nodes if o.op == "output")
            ),
            sorted(outputs),
        ]
    )
    for o in outputs:
        users.setdefault(o, []).append(loss)
    # backward: op ids R + n_fw + 1 + k for forward op R + n_fw - 1 - k (reverse order)
    bw_id = {R + n_fw - 1 - k: R + n_fw + 1 + k for k in range(n_fw)}
    for k in range(n_fw):
        f = R + n_fw - 1 - k
        cost = ops[f - R][2] * (2.0 if fw_params[f] else 1.0)
        bdeps = sorted(loss if u == loss else bw_id[u] for u in users.get(f, [loss]))
        ops.append([f"{ops[f - R][0]}.bw", "b", cost, bdeps])
    return {
        "format": 1,
        "model": name,
        "architecture": source,
        "generator": "tools/build_op_graphs.py",
        "torch": torch.__version__.split("+")[0],
        "inputs": [list(a.shape) for a in args],
        "param_count": sum(n for _, n in recvs),
        "time_oracle": "forward FLOPs (multiply-add = 2; BatchNorm 4/element; other ops "
        "1/output element); backward = 2x forward for ops with parameters, else 1x",
        "recvs": recvs,
        "ops": ops,
    }


def dumps(graph: dict[str, Any]) -> str:
    """JSON with one recv / op per line (reviewable diffs, ~40 bytes an op)."""
    head = {k: v for k, v in graph.items() if k not in ("recvs", "ops")}
    lines = ["{"]
    for k, v in head.items():
        lines.append(f"  {json.dumps(k)}: {json.dumps(v)},")
    for key in ("recvs", "ops"):
        rows = [f"    {json.dumps(r, separators=(',', ':'))}" for r in graph[key]]
        tail = "," if key == "recvs" else ""
        lines.append(f'  "{key}": [\n' + ",\n".join(rows) + f"\n  ]{tail}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if a shipped file differs")
    ap.add_argument("models", nargs="*", default=list(MODELS))
    args = ap.parse_args(argv)
    bad = 0
    for name in args.models:
        text = dumps(trace(name))
        path = OUT / f"{name}.json"
        g = json.loads(text)
        print(f"{name}: {len(g['recvs'])} recvs, {len(g['ops'])} ops, {g['param_count']:,} params")
        if args.check:
            if not path.exists() or path.read_text() != text:
                print(f"  {path} differs from a fresh build", file=sys.stderr)
                bad += 1
        else:
            OUT.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
