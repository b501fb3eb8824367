"""WholeGraph's spelling of the store: a script written for ``pylibwholegraph.torch`` runs on
GraphLoom's host tables with its import changed and ``"cuda"`` locations made ``"cpu"``::

    import graphloom.wholegraph as wgth

    global_comm, local_comm = wgth.init_torch_env_and_create_wm_comm(rank, size, local_rank,
                                                                      local_size)
    emb = wgth.create_embedding(global_comm, "distributed", "cpu", torch.float32, [n, 64],
                                random_init=True)
    opt = wgth.create_wholememory_optimizer(emb, "adam", {"weight_decay": 0.0})
    module = wgth.WholeMemoryEmbeddingModule(emb)
    loss = f(module(ids)); loss.backward(); opt.step(lr)

Names, signatures and return shapes are WholeGraph's: ``get_local_tensor()`` and
``get_global_tensor()`` return ``(tensor, offset)`` (the offset is the first row's index),
``get_all_chunked_tensor()`` returns ``(tensors, offsets)``. What differs:

- tables live in host memory: ``memory_location="cuda"`` raises, and ``host_view`` is
  accepted and changes nothing; ``cache_policy`` (a GPU cache of host rows) is accepted and
  ignored;
- the optimizers are GraphLoom's sparse ones with WholeGraph's parameters (``"sgd"``;
  ``"adam"``, GraphLoom's lazy Adam; ``"adagrad"``; ``"rmsprop"``);
- ``"cpu"`` memory is shared memory every process of a machine maps for the continuous and
  chunked types, and each process's own for the distributed one; tables spread over the ranks
  of a torchrun or an mpirun job as the memory type says;
- ``embedding_entry_partition`` must be the store's even partition (or None), and the
  optimizer states are not exposed as tensors.

The modules are pylibwholegraph.torch's concepts: :mod:`~graphloom.wholegraph.comm` (the job
and its communicators), :mod:`~graphloom.wholegraph.tensor` (``WholeMemoryTensor`` and part
files), :mod:`~graphloom.wholegraph.embedding` (embeddings, their module, optimizers and cache
policies), :mod:`~graphloom.wholegraph.memory` (memory types, locations and dtypes as the
store's), and the graph side: :mod:`~graphloom.wholegraph.graph_structure` (``GraphStructure``,
a CSR in WholeMemory tensors, sampled one hop or several),
:mod:`~graphloom.wholegraph.wholegraph_ops` (uniform and weighted sampling without
replacement) and :mod:`~graphloom.wholegraph.graph_ops` (``append_unique``,
``add_csr_self_loop``). Sampled outputs are CPU tensors with WholeGraph's dtypes.
"""

from __future__ import annotations

from .comm import (
    WholeMemoryCommunicator,
    create_group_communicator,
    destroy_communicator,
    finalize,
    get_global_communicator,
    get_local_device_communicator,
    get_local_node_communicator,
    get_local_rank,
    get_local_size,
    get_rank,
    get_world_size,
    init,
    init_torch_env,
    init_torch_env_and_create_wm_comm,
)
from .embedding import (
    WholeMemoryCachePolicy,
    WholeMemoryEmbedding,
    WholeMemoryEmbeddingModule,
    WholeMemoryOptimizer,
    create_builtin_cache_policy,
    create_embedding,
    create_embedding_from_filelist,
    create_wholememory_cache_policy,
    create_wholememory_optimizer,
    destroy_embedding,
    destroy_wholememory_cache_policy,
    destroy_wholememory_optimizer,
)
from . import graph_ops, wholegraph_ops
from .graph_ops import add_csr_self_loop, append_unique
from .graph_structure import GraphStructure
from .wholegraph_ops import (
    unweighted_sample_without_replacement,
    weighted_sample_without_replacement,
)
from .tensor import (
    WholeMemoryTensor,
    create_wholememory_tensor,
    create_wholememory_tensor_from_filelist,
    destroy_wholememory_tensor,
    get_part_file_list,
    get_part_file_name,
)

__all__ = [
    "GraphStructure",
    "add_csr_self_loop",
    "append_unique",
    "graph_ops",
    "unweighted_sample_without_replacement",
    "weighted_sample_without_replacement",
    "wholegraph_ops",
    "init",
    "init_torch_env",
    "init_torch_env_and_create_wm_comm",
    "finalize",
    "WholeMemoryCommunicator",
    "get_global_communicator",
    "get_local_node_communicator",
    "get_local_device_communicator",
    "create_group_communicator",
    "destroy_communicator",
    "WholeMemoryTensor",
    "create_wholememory_tensor",
    "create_wholememory_tensor_from_filelist",
    "destroy_wholememory_tensor",
    "WholeMemoryEmbedding",
    "create_embedding",
    "create_embedding_from_filelist",
    "destroy_embedding",
    "WholeMemoryEmbeddingModule",
    "WholeMemoryOptimizer",
    "create_wholememory_optimizer",
    "destroy_wholememory_optimizer",
    "WholeMemoryCachePolicy",
    "create_builtin_cache_policy",
    "create_wholememory_cache_policy",
    "destroy_wholememory_cache_policy",
    "get_part_file_name",
    "get_part_file_list",
    "get_rank",
    "get_world_size",
    "get_local_rank",
    "get_local_size",
]
