"""GraphLoom in PyTorch and PyTorch Geometric: trainable store tables under autograd with the
sparse optimizers, and GraphLoom model files as PyG modules and back.

Trainable embeddings (WholeGraph's ``WholeMemoryEmbeddingModule`` and its optimizer)::

    emb = graphloom.create_embedding(comm, "distributed", "host", "float32", (n, 64),
                                     optimizer="lazy_adam")
    module = graphloom.torch.EmbeddingModule(emb)
    opt = graphloom.torch.SparseOptimizer([module], lr=0.01)
    loss = f(module(ids)); loss.backward(); opt.step(); opt.zero_grad()

Models::

    model = graphloom.torch.load_pyg("model.safetensors")   # GCNConv / SAGEConv / GATConv
    log_probs = model(x, edge_index)
    graphloom.torch.save_for_graphloom(pyg_model, "model.safetensors")

The mapping is tested with torch 2.15.0 and torch_geometric 2.8.1.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ._arrays import ids_array
from ._extension import extension as _graphloom
from .embedding import Embedding

__all__ = [
    "EmbeddingModule",
    "SparseOptimizer",
    "GraphLoomGNN",
    "load_pyg",
    "save_for_graphloom",
]


class _Gather(torch.autograd.Function):
    """Gathers rows of a trainable table; backward keeps the rows' gradients for the sparse
    optimizer (nothing flows into the table through torch)."""

    @staticmethod
    def forward(ctx: Any, anchor: torch.Tensor, ids: np.ndarray, module: "EmbeddingModule") -> torch.Tensor:
        ctx.ids = ids
        ctx.module = module
        return module.embedding.gather(ids)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, None, None]:
        ctx.module._pending.append((ctx.ids, grad.detach().float().contiguous()))
        return None, None, None


class EmbeddingModule(torch.nn.Module):
    """A trainable store table as a module: ``module(ids)`` gathers rows that take part in
    autograd; their gradients wait in the module until :meth:`SparseOptimizer.step` routes
    them to the rows' owners and applies the table's optimizer there."""

    def __init__(self, embedding: Embedding) -> None:
        super().__init__()
        if embedding.optimizer is None:
            raise ValueError(
                "EmbeddingModule needs a trainable table: create it with optimizer="
                "'sgd', 'lazy_adam', 'adagrad' or 'rmsprop'"
            )
        self.embedding = embedding
        self._pending: list[tuple[np.ndarray, torch.Tensor]] = []
        # Autograd calls a Function's backward only when an input requires grad.
        self._anchor = torch.zeros(0, requires_grad=True)

    def forward(self, ids: Any) -> torch.Tensor:
        """Rows ``ids`` (int64 or int32 CPU tensor, numpy array or list)."""
        # A copy: the caller may refill its buffer before the optimizer step reads the ids.
        return _Gather.apply(self._anchor, ids_array(ids).copy(), self)

    def take_gradients(self) -> tuple[np.ndarray, np.ndarray]:
        """The ids and float32 gradients gathered since the last step, in the order their
        backward passes ran, and forgets them."""
        dim = self.embedding.shape[1]
        if not self._pending:
            return np.zeros(0, np.int64), np.zeros((0, dim), np.float32)
        ids = np.concatenate([i for i, _ in self._pending])
        grads = torch.cat([g for _, g in self._pending]).numpy()
        self._pending.clear()
        return ids, grads


class SparseOptimizer:
    """Steps trainable tables from the gradients their :class:`EmbeddingModule` gathered, with
    the optimizer each table was made with (sgd, lazy_adam, adagrad, rmsprop). ``step`` is
    collective: every rank calls it, with or without gradients of its own."""

    def __init__(self, modules: Iterable[EmbeddingModule], lr: float) -> None:
        self.modules = list(modules)
        self.lr = float(lr)

    def step(self) -> None:
        """Applies one step to every table and clears their gradients."""
        for module in self.modules:
            ids, grads = module.take_gradients()
            module.embedding.apply_gradients(ids, grads, self.lr)

    def zero_grad(self) -> None:
        """Forgets gradients gathered since the last step."""
        for module in self.modules:
            module._pending.clear()


def _pyg() -> Any:
    try:
        import torch_geometric.nn as pyg_nn
    except ImportError as e:
        raise ImportError("this needs torch_geometric (pip install torch_geometric)") from e
    return pyg_nn


class GraphLoomGNN(torch.nn.Module):
    """GraphLoom's model as PyG layers: ``dropout -> conv -> activation`` per hidden layer
    (ReLU, ELU for GAT and GATv2), ``dropout -> conv`` last, then APPNP's ``propagation`` where there
    is one, and ``log_softmax``; ``forward(x, edge_index)`` returns log-probabilities.
    ``config`` is the model file's configuration. APPNP's layers are ``torch.nn.Linear``,
    which read no graph."""

    def __init__(
        self,
        config: dict[str, Any],
        convs: Sequence[torch.nn.Module],
        propagation: torch.nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.config = dict(config)
        self.convs = torch.nn.ModuleList(convs)
        self.propagation = propagation
        self.act = torch.nn.ELU() if config["arch"] in ("gat", "gatv2") else torch.nn.ReLU()
        self.input_embedding: torch.Tensor | None = None

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor,
                edge_attr: torch.Tensor | None = None) -> torch.Tensor:
        edges = self.config.get("edge_dim", 0) > 0
        if edges and edge_attr is None:
            raise ValueError(f"{self.config['arch']} reads edge features: call "
                             "model(x, edge_index, edge_attr)")
        if not edges and edge_attr is not None:
            raise ValueError(f"this {self.config['arch']} takes no edge features")
        last = len(self.convs) - 1
        for i, conv in enumerate(self.convs):
            p = self.config["input_dropout"] if i == 0 else self.config["dropout"]
            x = F.dropout(x, p=p, training=self.training)
            if isinstance(conv, torch.nn.Linear):
                x = conv(x)
            elif edges:
                x = conv(x, edge_index, edge_attr)
            else:
                x = conv(x, edge_index)
            if i < last:
                x = self.act(x)
        if self.propagation is not None:
            x = self.propagation(x, edge_index)
        return F.log_softmax(x, dim=-1)


def _widths(config: dict[str, Any]) -> list[tuple[int, int, int, bool]]:
    """Per layer: (input width, output width per head, heads, concatenated)."""
    layers, arch = config["layers"], config["arch"]
    out = []
    width = config["in_dim"]
    for layer in range(layers):
        last = layer == layers - 1
        if arch in ("gat", "gatv2"):
            heads = config["out_heads"] if last else config["heads"]
            channels = config["out_dim"] if last else config["hidden"]
            out.append((width, channels, heads, not last))
            width = channels * heads
        else:
            channels = config["out_dim"] if last else config["hidden"]
            out.append((width, channels, 1, True))
            width = channels
    return out


def _linear(weight: torch.Tensor, bias: torch.Tensor) -> torch.nn.Linear:
    """A ``torch.nn.Linear`` computing ``x @ weight + bias`` (GraphLoom's ``[in, out]``)."""
    lin = torch.nn.Linear(weight.shape[0], weight.shape[1])
    lin.weight.data.copy_(weight.T)
    lin.bias.data.copy_(bias)
    return lin


def load_pyg(path: str | os.PathLike) -> GraphLoomGNN:
    """A GraphLoom model file as a :class:`GraphLoomGNN` of ``torch_geometric.nn`` layers
    (GCNConv, SAGEConv with mean aggregation, GATConv, GATv2Conv, GINConv with ``train_eps`` over
    ``Linear -> ReLU -> Linear``, GINEConv as GINConv with ``edge_dim``, one SGConv of K = the
    SGC's layers, APPNP's linears followed by ``APPNP(K, alpha)``), in evaluation mode, float32.
    ``model(x, edge_index)`` (GINE: ``model(x, edge_index, edge_attr)``) gives GraphLoom's
    log-probabilities. A model trained on a learnt
    input embedding carries it as ``model.input_embedding`` (its ``x``). Models with batch
    normalisation do not map (PyG's BatchNorm keeps running statistics GraphLoom does not)."""
    pyg_nn = _pyg()
    config, params, embedding = _graphloom.read_model_file(os.fspath(path))
    if config["batch_norm"]:
        raise ValueError(
            f"{path}: a model with batch normalisation has no PyG equivalent here "
            "(GraphLoom normalises with batch statistics, PyG's BatchNorm with running ones)"
        )
    if config["arch"] == "sign":
        raise ValueError(
            f"{path}: SIGN reads precomputed propagations, and PyG has no SIGN layer to map it "
            "to (its SIGN is a transform): `graphloom predict` runs it"
        )
    values = {name: torch.from_dlpack(view).float() for name, view in params}
    if config["arch"] == "sgc":
        # The hops before the last layer carry no parameters: one SGConv does them all.
        last = config["layers"] - 1
        conv = pyg_nn.SGConv(config["in_dim"], config["out_dim"], K=config["layers"])
        conv.lin = _linear(values[f"layers.{last}.weight"], values[f"layers.{last}.bias"])
        return _with_embedding(GraphLoomGNN(config, [conv]), embedding).eval()
    convs = []
    for layer, (fan_in, channels, heads, concat) in enumerate(_widths(config)):
        p = lambda name: values[f"layers.{layer}.{name}"]  # noqa: E731
        if config["arch"] == "gcn":
            conv = pyg_nn.GCNConv(fan_in, channels)
            conv.lin.weight.data.copy_(p("weight").T)
            conv.bias.data.copy_(p("bias"))
        elif config["arch"] in ("gin", "gine"):
            mlp = torch.nn.Sequential(
                torch.nn.Linear(fan_in, channels), torch.nn.ReLU(), torch.nn.Linear(channels, channels)
            )
            # GINConv resets its MLP when made: the values go in after.
            if config["arch"] == "gine":
                conv = pyg_nn.GINEConv(mlp, train_eps=True, edge_dim=config["edge_dim"])
                conv.lin.weight.data.copy_(p("lin.weight").T)
                conv.lin.bias.data.copy_(p("lin.bias"))
            else:
                conv = pyg_nn.GINConv(mlp, train_eps=True)
            for i, lin in enumerate((conv.nn[0], conv.nn[2])):
                lin.weight.data.copy_(p(f"mlp.{i}.weight").T)
                lin.bias.data.copy_(p(f"mlp.{i}.bias"))
            conv.eps.data.copy_(p("eps"))
        elif config["arch"] == "appnp":
            conv = _linear(p("lin.weight"), p("lin.bias"))
        elif config["arch"] == "gatv2":
            conv = pyg_nn.GATv2Conv(
                fan_in, channels, heads=heads, concat=concat,
                dropout=config["attention_dropout"],
                edge_dim=config.get("edge_dim") or None,
            )
            if conv.lin_edge is not None:
                conv.lin_edge.weight.data.copy_(p("lin_edge.weight").T)
            for side in ("lin_l", "lin_r"):
                lin = getattr(conv, side)
                lin.weight.data.copy_(p(f"{side}.weight").T)
                lin.bias.data.copy_(p(f"{side}.bias"))
            conv.att.data.copy_(p("att").reshape(1, heads, channels))
            conv.bias.data.copy_(p("bias"))
        elif config["arch"] == "sage":
            conv = pyg_nn.SAGEConv(fan_in, channels, aggr="mean")
            conv.lin_l.weight.data.copy_(p("lin_l.weight").T)
            conv.lin_l.bias.data.copy_(p("lin_l.bias"))
            conv.lin_r.weight.data.copy_(p("lin_r.weight").T)
        else:
            conv = pyg_nn.GATConv(
                fan_in, channels, heads=heads, concat=concat,
                dropout=config["attention_dropout"],
            )
            conv.lin.weight.data.copy_(p("lin.weight").T)
            conv.att_src.data.copy_(p("att_src").reshape(1, heads, channels))
            conv.att_dst.data.copy_(p("att_dst").reshape(1, heads, channels))
            conv.bias.data.copy_(p("bias"))
        convs.append(conv)
    propagation = None
    if config["arch"] == "appnp":
        propagation = pyg_nn.APPNP(K=config["hops"], alpha=config["teleport"])
    return _with_embedding(GraphLoomGNN(config, convs, propagation), embedding).eval()


def _with_embedding(model: GraphLoomGNN, embedding: Any) -> GraphLoomGNN:
    """``model`` carrying the model file's learnt input embedding, when it has one."""
    if embedding is not None:
        model.input_embedding = torch.from_dlpack(embedding).float()
    return model


def _fail(message: str) -> None:
    raise ValueError(f"save_for_graphloom: {message}")


def _check_conv(conv: Any, arch: str, last: bool) -> None:
    """Refuses a PyG layer whose options GraphLoom's layer does not have."""
    name = type(conv).__name__
    if arch == "gcn":
        if conv.improved or not conv.add_self_loops or not conv.normalize or conv.bias is None:
            _fail(f"{name}: GraphLoom's GCN is improved=False, add_self_loops=True, normalize=True, bias=True")
    elif arch == "sage":
        aggr = getattr(conv, "aggr", None)
        if aggr != "mean" or not conv.root_weight or conv.normalize or conv.project:
            _fail(f"{name}: GraphLoom's SAGE is aggr='mean', root_weight=True, normalize=False, project=False")
        if conv.lin_l.bias is None or conv.lin_r.bias is not None:
            _fail(f"{name}: GraphLoom's SAGE has one bias, on lin_l")
    elif arch in ("gin", "gine"):
        if arch == "gine" and conv.lin is None:
            _fail(f"{name}: GraphLoom's GINE maps edge features by a Linear (edge_dim given)")
        mlp = list(conv.nn) if isinstance(conv.nn, torch.nn.Sequential) else []
        kinds = [type(m) for m in mlp]
        if kinds != [torch.nn.Linear, torch.nn.ReLU, torch.nn.Linear] or any(m.bias is None for m in mlp[::2]):
            _fail(f"{name}: GraphLoom's GIN has nn = Sequential(Linear, ReLU, Linear), with biases")
        if not mlp[0].out_features == mlp[2].in_features == mlp[2].out_features:
            _fail(f"{name}: GraphLoom's GIN MLP is in -> out -> out wide, this one "
                  f"{mlp[0].in_features} -> {mlp[0].out_features} -> {mlp[2].out_features}")
        if getattr(conv, "aggr", None) != "add":
            _fail(f"{name}: GraphLoom's GIN sums its neighbours (aggr='add'), this one {conv.aggr!r}")
    elif arch == "gatv2":
        if conv.share_weights or not conv.add_self_loops or abs(conv.negative_slope - 0.2) > 1e-12 \
                or (conv.edge_dim is not None and conv.fill_value != "mean"):
            _fail(f"{name}: GraphLoom's GATv2 has share_weights=False, adds self-loops (with "
                  "edge features, fill_value='mean'), negative_slope 0.2")
        if getattr(conv, "res", None) is not None:
            _fail(f"{name}: residual connections do not map")
        if conv.bias is None or conv.lin_l.bias is None or conv.lin_r.bias is None:
            _fail(f"{name}: GraphLoom's GATv2 has biases on lin_l, lin_r and its output")
        if conv.concat == last:
            _fail(f"{name}: GraphLoom's GATv2 concatenates the heads of hidden layers and averages the last layer's")
    else:
        if getattr(conv, "lin", None) is None:
            _fail(f"{name}: separate source and destination weights (lin_src/lin_dst) do not map")
        if conv.edge_dim is not None or not conv.add_self_loops or abs(conv.negative_slope - 0.2) > 1e-12:
            _fail(f"{name}: GraphLoom's GAT has no edge features, adds self-loops, negative_slope 0.2")
        if getattr(conv, "res", None) is not None:
            _fail(f"{name}: residual connections do not map")
        if conv.bias is None:
            _fail(f"{name}: GraphLoom's GAT has a bias")
        if conv.concat == last:
            _fail(f"{name}: GraphLoom's GAT concatenates the heads of hidden layers and averages the last layer's")


def _check_activation(model: torch.nn.Module, arch: str) -> None:
    """Refuses a model whose activation is not GraphLoom's (ReLU, ELU with alpha 1 for GAT and
    GATv2) or cannot be seen (a module without an ``act`` attribute)."""
    expected = torch.nn.ELU if arch in ("gat", "gatv2") else torch.nn.ReLU
    if isinstance(model, GraphLoomGNN):
        return
    act = getattr(model, "act", None)
    if act is None:
        _fail(
            f"{type(model).__name__} has no `act` attribute saying its activation: GraphLoom's "
            f"{arch} uses {expected.__name__}"
        )
    if not isinstance(act, torch.nn.Module):
        act = {F.relu: torch.nn.ReLU(), F.elu: torch.nn.ELU()}.get(act, act)
    if type(act) is not expected:
        name = type(act).__name__ if isinstance(act, torch.nn.Module) else repr(act)
        _fail(f"GraphLoom's {arch} uses {expected.__name__}, the model {name}")
    if isinstance(act, torch.nn.ELU) and act.alpha != 1.0:
        _fail(f"GraphLoom's ELU has alpha 1, the model's {act.alpha}")


def _conv_shape(conv: Any, arch: str) -> tuple[int, int, int]:
    """A PyG layer's (input width, output width per head, heads); GINConv's are its MLP's."""
    if arch in ("gin", "gine"):
        return conv.nn[0].in_features, conv.nn[2].out_features, 1
    heads = conv.heads if arch in ("gat", "gatv2") else 1
    return conv.in_channels, conv.out_channels, heads


def _edge_dim(conv: Any, arch: str) -> int:
    """The edge features a PyG layer reads: GINEConv's and GATv2Conv's ``edge_dim`` (0: none)."""
    if arch == "gine":
        return conv.lin.in_channels
    if arch == "gatv2" and conv.edge_dim is not None:
        return conv.edge_dim
    return 0


def _shape_of(convs: list, arch: str) -> dict[str, Any]:
    """The model file's sizes read off a list of PyG layers (first and last layer)."""
    first, last = _conv_shape(convs[0], arch), _conv_shape(convs[-1], arch)
    hidden = first if len(convs) > 1 else last
    return {
        "arch": arch,
        "in_dim": first[0],
        "hidden": hidden[1],
        "out_dim": last[1],
        "layers": len(convs),
        "heads": hidden[2],
        "out_heads": last[2],
        "edge_dim": _edge_dim(convs[0], arch),
    }


def save_for_graphloom(model: torch.nn.Module, path: str | os.PathLike, *, dropout: float | None = None) -> None:
    """Writes a PyG model as a GraphLoom model file, for ``graphloom train --init-model`` and
    ``graphloom predict``. What maps:

    - a :class:`GraphLoomGNN` (from :func:`load_pyg`, SGC's and APPNP's included);
    - ``torch_geometric.nn.models.GCN`` and ``GraphSAGE`` with their defaults (ReLU, no norm,
      no jumping knowledge, ``out_channels`` given), and ``GAT`` with ``act="elu"`` (PyG's
      default is ReLU; GraphLoom's GAT uses ELU): its hidden layers concatenate their heads,
      its last averages them;
    - any module whose ``convs`` is a list of one kind of those layers with the same options,
      or of GATv2Conv (ELU; ``share_weights=False``), GINConv (``nn`` a
      ``Sequential(Linear, ReLU, Linear)``; ReLU) or GINEConv (as GINConv, with ``edge_dim``),
      and whose ``act`` attribute is that activation, computing ``conv -> act -> dropout`` per hidden layer (its ``forward``
      cannot be checked: that order is the caller's word).

    Anything else raises ValueError saying what does not map. ``dropout`` (default: the
    model's) is recorded for training the model further."""
    pyg_nn = _pyg()
    if getattr(model, "input_embedding", None) is not None:
        _fail("the model carries a learnt input embedding, which this writer does not save")
    if isinstance(model, GraphLoomGNN) and model.config["arch"] in ("sgc", "appnp"):
        _save_loaded(model, path, dropout)
        return
    convs = list(getattr(model, "convs", []))
    kinds = {pyg_nn.GCNConv: "gcn", pyg_nn.SAGEConv: "sage", pyg_nn.GATConv: "gat",
             pyg_nn.GATv2Conv: "gatv2", pyg_nn.GINConv: "gin", pyg_nn.GINEConv: "gine"}
    names = "GCNConv, SAGEConv, GATConv, GATv2Conv, GINConv or GINEConv"
    if not convs:
        _fail(f"{type(model).__name__} has no `convs` list of {names} layers")
    arch = kinds.get(type(convs[0]))
    if arch is None or any(type(c) is not type(convs[0]) for c in convs):
        _fail(f"the layers must all be of one kind of {names}: "
              f"got {[type(c).__name__ for c in convs]}")
    for i, conv in enumerate(convs):
        _check_conv(conv, arch, i == len(convs) - 1)
        if getattr(conv, "flow", "source_to_target") != "source_to_target":
            _fail(f"layer {i}: flow {conv.flow!r}; GraphLoom's messages go source to target")
    for i, (conv, (fan_in, channels, heads, _)) in enumerate(zip(convs, _widths(_shape_of(convs, arch)))):
        got = _conv_shape(conv, arch)
        if got != (fan_in, channels, heads):
            _fail(
                f"layer {i} is (in {got[0]}, out {got[1]}, heads {got[2]}); GraphLoom's layer "
                f"there would be (in {fan_in}, out {channels}, heads {heads}): every hidden "
                "layer has the same width and heads"
            )
    _check_activation(model, arch)
    norms = getattr(model, "norms", None)
    if norms is not None and not all(isinstance(n, torch.nn.Identity) for n in norms):
        _fail("`norms` do not map (GraphLoom's batch normalisation has no running statistics)")
    if getattr(model, "jk", None) is not None:
        _fail("jumping knowledge (`jk`) does not map")
    if isinstance(model, GraphLoomGNN):
        base = model.config
    else:
        p = dropout
        if p is None:
            d = getattr(model, "dropout", 0.0)
            p = d.p if isinstance(d, torch.nn.Dropout) else float(d)
        base = {"dropout": p, "input_dropout": 0.0}
    config = {
        **_shape_of(convs, arch),
        "batch_norm": False,
        "dropout": float(dropout if dropout is not None else base["dropout"]),
        "input_dropout": float(base["input_dropout"]),
        "attention_dropout": float(convs[0].dropout) if arch in ("gat", "gatv2") else 0.0,
    }
    params: list = []
    add = _adder(params)
    for layer, conv in enumerate(convs):
        pre = f"layers.{layer}."
        if arch == "gcn":
            add(pre + "weight", conv.lin.weight.T)
            add(pre + "bias", conv.bias)
        elif arch == "sage":
            add(pre + "lin_l.weight", conv.lin_l.weight.T)
            add(pre + "lin_l.bias", conv.lin_l.bias)
            add(pre + "lin_r.weight", conv.lin_r.weight.T)
        elif arch == "gatv2":
            for side in ("lin_l", "lin_r"):
                add(pre + f"{side}.weight", getattr(conv, side).weight.T)
                add(pre + f"{side}.bias", getattr(conv, side).bias)
            add(pre + "att", conv.att.reshape(-1))
            if conv.lin_edge is not None:
                add(pre + "lin_edge.weight", conv.lin_edge.weight.T)
            add(pre + "bias", conv.bias)
        elif arch in ("gin", "gine"):
            # GraphLoom's eps is learnt; a fixed one (train_eps=False, a buffer) is its start.
            add(pre + "eps", torch.as_tensor(conv.eps).reshape(1))
            if arch == "gine":
                add(pre + "lin.weight", conv.lin.weight.T)
                add(pre + "lin.bias", conv.lin.bias)
            for i, lin in enumerate((conv.nn[0], conv.nn[2])):
                add(pre + f"mlp.{i}.weight", lin.weight.T)
                add(pre + f"mlp.{i}.bias", lin.bias)
        else:
            add(pre + "lin.weight", conv.lin.weight.T)
            add(pre + "att_src", conv.att_src.reshape(-1))
            add(pre + "att_dst", conv.att_dst.reshape(-1))
            add(pre + "bias", conv.bias)
    _graphloom.write_model_file(os.fspath(path), config, params)


def _adder(params: list) -> Any:
    """A function appending a named parameter to ``params`` as ``write_model_file`` takes it
    (GraphLoom's ``[in, out]`` weights are the transposes of ``torch.nn.Linear``'s)."""

    def add(name: str, value: torch.Tensor) -> None:
        array = np.ascontiguousarray(value.detach().to("cpu", torch.float32).numpy())
        params.append((name, array.reshape(-1), list(array.shape)))

    return add


def _save_loaded(model: GraphLoomGNN, path: str | os.PathLike, dropout: float | None) -> None:
    """Writes an SGC or APPNP :class:`GraphLoomGNN` (from :func:`load_pyg`: one SGConv, or
    linear layers before APPNP's propagation, neither a list of one kind of layer) back as its
    model file."""
    config = dict(model.config)
    if dropout is not None:
        config["dropout"] = float(dropout)
    # The propagation's settings are the modules', which a caller may have changed.
    if config["arch"] == "sgc":
        config["layers"] = model.convs[0].K
    else:
        config["hops"], config["teleport"] = model.propagation.K, float(model.propagation.alpha)
    params: list = []
    add = _adder(params)
    if config["arch"] == "sgc":
        lin = model.convs[0].lin
        last = f"layers.{config['layers'] - 1}."
        add(last + "weight", lin.weight.T)
        add(last + "bias", lin.bias)
    else:
        for layer, lin in enumerate(model.convs):
            add(f"layers.{layer}.lin.weight", lin.weight.T)
            add(f"layers.{layer}.lin.bias", lin.bias)
    _graphloom.write_model_file(os.fspath(path), config, params)
