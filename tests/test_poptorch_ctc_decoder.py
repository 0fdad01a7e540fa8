"""``poptorch.ctc_beam_search_decoder`` as PopTorch programs call it, eagerly and inside an
inference model, against hand-worked cases and a brute force that sums the probability of
every alignment of every labelling (tiny T and C)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import xlgraph.poptorch as poptorch  # noqa: E402


def _log(rows: list[list[float]]) -> torch.Tensor:
    """[T, 1, C] log-probabilities of one batch item."""
    return torch.tensor(rows).log().unsqueeze(1)


def _labelling_probs(p: np.ndarray, blank: int) -> dict[tuple[int, ...], float]:
    """Probability of each labelling of ``p`` ([T, C] probabilities): the product of each
    alignment's probabilities, added per labelling (repeats merged, then blanks dropped)."""
    probs: dict[tuple[int, ...], float] = {}
    for alignment in itertools.product(range(p.shape[1]), repeat=p.shape[0]):
        labels = tuple(k for k, _ in itertools.groupby(alignment) if k != blank)
        probs[labels] = probs.get(labels, 0.0) + math.prod(p[t, k] for t, k in
                                                           enumerate(alignment))
    return probs


class Decoder(torch.nn.Module):
    def __init__(self, blank: int, beam_width: int, top_paths: int) -> None:
        super().__init__()
        self.args = (blank, beam_width, top_paths)

    def forward(self, probs, lengths):
        return poptorch.ctc_beam_search_decoder(probs, lengths, *self.args)


def test_the_best_labelling_is_not_the_best_alignment():
    # the likeliest alignment is blank-blank (0.25), but "1" has three alignments: 0.56
    probs = _log([[0.5, 0.4, 0.1], [0.5, 0.4, 0.1]])
    path_probs, lengths, paths = poptorch.ctc_beam_search_decoder(probs, torch.tensor([2]),
                                                                  top_paths=3)
    torch.testing.assert_close(path_probs, torch.tensor([[0.56, 0.25, 0.11]]).log())
    assert lengths.tolist() == [[1, 0, 1]] and lengths.dtype == torch.int32
    assert paths.tolist() == [[[1, 0], [0, 0], [2, 0]]] and paths.dtype == torch.int32


def test_a_repeated_label_needs_a_blank_between():
    # "1 1" only as 1, blank, 1 (0.6 * 0.4 * 0.6); "1" takes the 1-1-1, 1-1-b, ... alignments
    probs = _log([[0.4, 0.6], [0.4, 0.6], [0.4, 0.6]])
    path_probs, lengths, paths = poptorch.ctc_beam_search_decoder(probs, torch.tensor([3]),
                                                                  top_paths=3)
    want = {(1,): 0.6**3 + 2 * 0.6**2 * 0.4 + 3 * 0.6 * 0.4**2, (1, 1): 0.6 * 0.4 * 0.6,
            (): 0.4**3}
    assert lengths.tolist() == [[1, 2, 0]]
    assert paths[0, :, :2].tolist() == [[1, 0], [1, 1], [0, 0]]
    torch.testing.assert_close(path_probs[0], torch.tensor([want[(1,)], want[(1, 1)],
                                                            want[()]]).log())


@pytest.mark.parametrize("blank", [0, 2])
def test_a_wide_beam_finds_each_labellings_whole_probability(blank):
    rng = np.random.default_rng(4)
    steps, batch, classes, top = 4, 3, 3, 4
    p = rng.dirichlet(np.ones(classes) * 0.7, size=(steps, batch))
    lengths = torch.tensor([4, 2, 3], dtype=torch.int32)
    probs = torch.tensor(np.log(p), dtype=torch.float32)
    path_probs, path_lengths, paths = poptorch.ctc_beam_search_decoder(
        probs, lengths, blank=blank, beam_width=50, top_paths=top)
    for b in range(batch):
        every = _labelling_probs(p[: int(lengths[b]), b], blank)
        best = sorted(every.items(), key=lambda item: -item[1])[:top]
        np.testing.assert_allclose(path_probs[b].exp().numpy(), [v for _, v in best],
                                   rtol=1e-5)
        got = [tuple(paths[b, k, : path_lengths[b, k]].tolist()) for k in range(top)]
        assert got == [labels for labels, _ in best]
        assert all(not paths[b, k, path_lengths[b, k]:].any() for k in range(top))  # 0 after


def test_a_narrow_beam_keeps_only_what_it_kept():
    """With one beam, the search follows one prefix: its probability counts only the
    alignments the beam kept, never more than the labelling's whole probability."""
    rng = np.random.default_rng(11)
    p = rng.dirichlet(np.ones(4), size=(5, 1))
    probs = torch.tensor(np.log(p), dtype=torch.float32)
    narrow, lengths, paths = poptorch.ctc_beam_search_decoder(probs, torch.tensor([5]),
                                                              beam_width=1)
    labels = tuple(paths[0, 0, : lengths[0, 0]].tolist())
    whole = _labelling_probs(p[:, 0], 0)[labels]
    assert narrow.exp().item() <= whole * (1 + 1e-5)
    wide, _, _ = poptorch.ctc_beam_search_decoder(probs, torch.tensor([5]), beam_width=100)
    assert wide.exp().item() == pytest.approx(max(_labelling_probs(p[:, 0], 0).values()),
                                              rel=1e-5)


def test_steps_past_an_items_length_are_ignored_and_missing_paths_are_empty():
    probs = _log([[0.3, 0.7], [0.9, 0.1]])  # step 2 is past the length
    path_probs, lengths, paths = poptorch.ctc_beam_search_decoder(
        probs, torch.tensor([1]), beam_width=3, top_paths=3)
    # one step gives "1" (0.7) or "" (0.3), and nothing else
    torch.testing.assert_close(path_probs[0, :2], torch.tensor([0.7, 0.3]).log())
    assert path_probs[0, 2].item() == -math.inf
    assert lengths.tolist() == [[1, 0, 0]] and paths.tolist() == [[[1, 0], [0, 0], [0, 0]]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_inside_an_inference_model_as_eagerly(dtype):
    rng = np.random.default_rng(2)
    probs = torch.tensor(np.log(rng.dirichlet(np.ones(5), size=(6, 2)))).to(dtype)
    lengths = torch.tensor([6, 4], dtype=torch.int32)
    model = poptorch.inferenceModel(Decoder(blank=0, beam_width=8, top_paths=3))
    got = model(probs, lengths)
    want = Decoder(blank=0, beam_width=8, top_paths=3)(probs, lengths)
    assert got[0].dtype == dtype and got[1].dtype == got[2].dtype == torch.int32
    assert got[2].shape == (2, 3, 6)
    torch.testing.assert_close(got[0], want[0])
    assert got[1].tolist() == want[1].tolist() and got[2].tolist() == want[2].tolist()
    if dtype == torch.float16:  # the labellings of the float32 search
        full = Decoder(0, 8, 3)(probs.float(), lengths)
        assert got[2].tolist() == full[2].tolist()
        torch.testing.assert_close(got[0].float(), full[0], rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("kwargs, words", [
    ({"top_paths": 3, "beam_width": 2}, "1 <= top_paths <= beam_width"),
    ({"blank": 4}, r"blank must be a class in \[0, 3\), got 4"),
])
def test_bad_arguments_are_refused_eagerly_and_compiled(kwargs, words):
    probs, lengths = torch.zeros(2, 1, 3), torch.tensor([2])
    with pytest.raises(poptorch.Error, match=words):
        poptorch.ctc_beam_search_decoder(probs, lengths, **kwargs)
    args = {"blank": 0, "beam_width": 100, "top_paths": 1, **kwargs}
    model = poptorch.inferenceModel(Decoder(args["blank"], args["beam_width"],
                                            args["top_paths"]))
    with pytest.raises(poptorch.Error, match=words):
        model(probs, lengths)


def test_a_length_beyond_the_steps_is_refused():
    with pytest.raises(ValueError, match=r"lengths must be in \[0, 2\].*got \[3\]"):
        poptorch.ctc_beam_search_decoder(torch.zeros(2, 1, 3), torch.tensor([3]))
