"""Trainable tables under torch autograd: gradients routed to the sparse optimizer, checked
against a numpy reference of the optimizers' update rules."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import graphloom as gl
import graphloom.torch as glt


@pytest.fixture(scope="module")
def comm() -> gl.Communicator:
    return gl.init()


def reference_step(w, state, ids, grads, lr, optimizer):
    """One step of `optimizer` in float64 on the rows `ids` touch (duplicates summed)."""
    total = {}
    for i, g in zip(ids, grads):
        total[i] = total.get(i, 0.0) + g.astype(np.float64)
    for i, g in total.items():
        if optimizer == "sgd":
            w[i] -= lr * g
        elif optimizer == "adagrad":
            state[i] += g * g
            w[i] -= lr * g / (np.sqrt(state[i]) + 1e-8)
        elif optimizer == "rmsprop":
            state[i] = 0.99 * state[i] + 0.01 * g * g
            w[i] -= lr * g / (np.sqrt(state[i]) + 1e-8)


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "rmsprop"])
@pytest.mark.parametrize("layout", ["continuous", "distributed"])
def test_steps_match_a_reference(comm, optimizer, layout):
    rows, dim = 30, 5
    emb = gl.create_embedding(comm, layout, "host", "float32", (rows, dim),
                              optimizer=optimizer, seed=3)
    module = glt.EmbeddingModule(emb)
    opt = glt.SparseOptimizer([module], lr=0.1)
    w = emb.gather(torch.arange(rows)).numpy().astype(np.float64)
    assert np.abs(w).max() <= 1 / np.sqrt(dim) and np.abs(w).max() > 0
    state = np.zeros_like(w)
    rng = np.random.default_rng(0)
    target = torch.from_numpy(rng.standard_normal((8, dim)).astype(np.float32))
    for _ in range(4):
        ids = torch.from_numpy(rng.integers(0, rows, 8))
        out = module(ids)
        loss = ((out - target) ** 2).sum() + out[:3].sum()  # two uses of the same rows
        loss.backward()
        grads = (2 * (out - target)).detach().numpy().copy()
        grads[:3] += 1.0
        opt.step()
        reference_step(w, state, ids.numpy(), grads, 0.1, optimizer)
        got = emb.gather(torch.arange(rows)).numpy()
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)
    untouched = emb.gather(torch.arange(rows))
    opt.step()  # no gradients: nothing changes
    assert torch.equal(emb.gather(torch.arange(rows)), untouched)


def test_lazy_adam_moves_only_touched_rows(comm, tmp_path):
    emb = gl.create_embedding(comm, "chunked", "host", "float32", (20, 4),
                              optimizer="lazy_adam", seed=1)
    module = glt.EmbeddingModule(emb)
    opt = glt.SparseOptimizer([module], lr=0.01)
    before = emb.gather(torch.arange(20)).clone()
    module(torch.tensor([2, 5, 5])).sum().backward()
    opt.step()
    after = emb.gather(torch.arange(20))
    changed = (after != before).any(dim=1).nonzero().flatten().tolist()
    assert changed == [2, 5]
    # Adam's first step moves each touched value by lr, whatever the gradient's size.
    np.testing.assert_allclose((before - after)[[2, 5]].numpy(), 0.01, rtol=1e-4)
    # Saved with its optimizer state, loaded back, it takes the same next step.
    emb.save(tmp_path / "emb")
    twin = gl.load_embedding(comm, tmp_path / "emb", 1, 4, "distributed", "host", "lazy_adam")
    twin_module = glt.EmbeddingModule(twin)
    twin_opt = glt.SparseOptimizer([twin_module], lr=0.01)
    for m, o in ((module, opt), (twin_module, twin_opt)):
        m(torch.tensor([5, 7])).pow(2).sum().backward()
        o.step()
    assert torch.equal(emb.gather(torch.arange(20)), twin.gather(torch.arange(20)))


def test_frozen_table_is_refused(comm):
    emb = gl.create_embedding(comm, "continuous", "host", "float32", (4, 4))
    with pytest.raises(ValueError, match="trainable"):
        glt.EmbeddingModule(emb)
