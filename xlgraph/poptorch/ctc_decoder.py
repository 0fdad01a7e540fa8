"""``poptorch.ctc_beam_search_decoder``: the most probable label sequences of CTC outputs.

A ``torch.library`` custom op (``xlpoptorch::ctc_beam_search_decoder``): captured in a model it
converts to xlgraph's ``ops.ctc_beam_search_decoder``; called eagerly, torch runs the same
kernel on the host. Inference only, as in PopTorch: the op has no gradient.
"""

from __future__ import annotations

from typing import Any

import torch

from xlgraph import ops
from xlgraph.errors import XlgraphError
from xlgraph.op import REGISTRY
from xlgraph.poptorch.support import Error
from xlgraph.poptorch.table import register
from xlgraph.poptorch.util import xlgraph_dtype
from xlgraph.tensor import TensorSpec

__all__ = ["ctc_beam_search_decoder"]


@torch.library.custom_op("xlpoptorch::ctc_beam_search_decoder", mutates_args=())
def _decoder(probs: torch.Tensor, lengths: torch.Tensor, blank: int, beam_width: int,
             top_paths: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    path_probs, path_lengths, paths = REGISTRY["ctc_beam_search_decoder"].kernel(
        probs.detach().cpu().double().numpy(), lengths.detach().cpu().numpy(), blank=blank,
        beam_width=beam_width, top_paths=top_paths)
    return (torch.from_numpy(path_probs).to(probs.dtype), torch.from_numpy(path_lengths),
            torch.from_numpy(paths))


def _spec(t: torch.Tensor) -> TensorSpec:
    return TensorSpec(tuple(t.shape), xlgraph_dtype(t.dtype))


@_decoder.register_fake
def _(probs: torch.Tensor, lengths: torch.Tensor, blank: int, beam_width: int,
      top_paths: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    steps, batch, _ = probs.shape
    return (probs.new_empty((batch, top_paths)),
            probs.new_empty((batch, top_paths), dtype=torch.int32),
            probs.new_empty((batch, top_paths, steps), dtype=torch.int32))


def ctc_beam_search_decoder(probs: torch.Tensor, lengths: torch.Tensor, blank: int = 0,
                            beam_width: int = 100, top_paths: int = 1,
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ``top_paths`` most probable label sequences of each batch item, by CTC prefix beam
    search over ``probs`` ([T, B, C] log-probabilities) for ``lengths[b]`` steps each.

    Returns ``(path_probs, path_lengths, paths)``: [B, top_paths] log-probabilities, most
    probable first; [B, top_paths] int32 lengths; [B, top_paths, T] int32 labels, 0 past each
    length.

    Raises:
        poptorch.Error: shapes or arguments the op cannot take (eagerly and when compiled).
    """
    blank, beam_width, top_paths = int(blank), int(beam_width), int(top_paths)
    try:  # the compiled op's checks, from the caller's line in both cases
        REGISTRY["ctc_beam_search_decoder"].infer(
            _spec(probs), _spec(lengths), blank=blank, beam_width=beam_width,
            top_paths=top_paths)
    except XlgraphError as exc:
        raise Error(f"ctc_beam_search_decoder: {exc}") from None
    return _decoder(probs, lengths, blank, beam_width, top_paths)


@register("xlpoptorch.ctc_beam_search_decoder.default")
def _convert(ctx: Any, probs: Any, lengths: Any, blank: int, beam_width: int,
             top_paths: int) -> Any:
    return ops.ctc_beam_search_decoder(probs, lengths, blank, beam_width, top_paths)
