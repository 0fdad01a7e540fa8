"""How a ``Module``'s record links to its sub-modules' (popxl-addons' ``__setattr__``).

Assigning a module to an attribute (``self.key = sub``) links ``sub`` under ``key``: ``sub``
builds in the name scope ``key``, and its variable-factory and named-input trees become
subtrees of the parent's, the same objects, so what ``sub`` records at any depth appears in
the parent under ``key.``; its called-graph gradient info joins the parent's likewise.
A reset empties every leaf in place and keeps the links, so they survive graph creations.
"""

from __future__ import annotations

from typing import Any, Protocol

from xlgraph.addons.dot_tree import DotTree
from xlgraph.addons.module_grad import Aux, VarGrad
from xlgraph.addons.named_tensors import NamedTensors
from xlgraph.addons.variable_factory import NamedVariableFactories

__all__ = ["Record", "link", "reset", "reaches", "called_infos", "refill"]


class Record(Protocol):
    """What this module reads of an ``xlgraph.addons.Module`` (which imports it)."""

    __dict__: dict[str, Any]

    def set_name_scope(self, name: str) -> None: ...


def _trees(module: Record) -> tuple[DotTree, DotTree]:
    d = module.__dict__
    if "_variable_factories" not in d:
        d["_variable_factories"] = NamedVariableFactories()
        d["_named_inputs"] = NamedTensors()
        d["_called_graphs_grad_info"] = {}
        d["_links"] = {}
    return d["_variable_factories"], d["_named_inputs"]


def link(parent: Record, key: str, sub: Record) -> None:
    """Link ``sub``'s record under ``key`` of ``parent``'s (replacing an earlier link)."""
    sub.set_name_scope(key)
    facts, named = _trees(parent)
    sub_facts, sub_named = _trees(sub)
    facts._map[key] = sub_facts
    named._map[key] = sub_named
    parent.__dict__["_links"][key] = sub


def reset(module: Record) -> None:
    """Empty ``module``'s record in place (factories, named inputs, aux, var_grad,
    called-graph info), its linked sub-modules' too, keeping the links."""
    facts, named = _trees(module)
    d = module.__dict__
    facts._map.clear()
    named._map.clear()
    d["_called_graphs_grad_info"].clear()
    d["aux"] = Aux()
    d["var_grad"] = VarGrad()
    for key, sub in d["_links"].items():
        reset(sub)
        facts._map[key], named._map[key] = _trees(sub)


def reaches(parent: Record, sub: Record) -> bool:
    """Whether ``sub`` is linked below ``parent`` at any depth."""
    links = parent.__dict__.get("_links", {})
    return any(s is sub or reaches(s, sub) for s in links.values())


def called_infos(module: Record) -> dict[Any, Any]:
    """The called-graph gradient info of ``module`` and of its linked sub-modules."""
    out: dict[Any, Any] = {}
    for sub in module.__dict__.get("_links", {}).values():
        out.update(called_infos(sub))
    out.update(module.__dict__.get("_called_graphs_grad_info", {}))
    return out


def refill(tree: DotTree, other: DotTree) -> None:
    """Make ``tree`` hold ``other``'s leaves, in place."""
    tree._map.clear()
    for name, leaf in other.to_dict().items():
        tree._insert_path(name, leaf)
