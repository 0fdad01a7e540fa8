"""Tutorials 3 and 5 with ``--optimizer adam``: one ``AdamOptimizerStep`` graph per variable.

Given whole variables, the Adam state is whole too (on-chip variables); given replica shards
(tutorial 5's RTS), each moment is sharded like the variable's shard and kept in remote
buffers with the weights, and the step is fed the reduce-scattered gradient shard.
"""

import popxl_addons as addons
from popxl_addons import NamedTensors, NamedVariableFactories
from popxl_addons.optimizers.adam import AdamOptimizerStep


def adam_graphs(weights, grads, lr):
    """``(state factories by variable name, {name: Adam step graph})`` for ``weights``
    (whole tensors or shards) and their gradients ``grads`` (alike)."""
    facts, graphs = NamedVariableFactories(), {}
    for name, var in weights.named_tensors.items():
        step_facts, graphs[name] = AdamOptimizerStep().create_graph(
            var, grads.get(name).spec, lr=lr)
        facts.insert(name, step_facts, overwrite=True)
    return facts, graphs


def adam_update(graphs, state, weights, grads):
    """Apply every variable's step (its weight updated in place)."""
    for name, graph in graphs.items():
        graph.bind(state.get(name)).call(weights.get(name), grads.get(name))


def remote_state(facts):
    """The sharded Adam state in remote buffers (each moment split like its variable):
    ``(variables, load graph, names, store graph)``."""
    shards = {name: f.shard_over for name, f in facts.to_dict().items()}
    buffers = addons.named_variable_buffers(facts, shard_over_dict=shards)
    variables = facts.init_remote(buffers, 0)
    load, names = addons.load_remote_graph(buffers)
    return variables, load, names, addons.store_remote_graph(buffers)


def sharded_adam_update(graphs, remote, weights, grads):
    """Load the state shards, apply the steps, store the state back."""
    _, load, names, store = remote
    state = NamedTensors.pack(names, load.call(0))
    adam_update(graphs, state, weights, grads)
    store.bind(state).call(0)
