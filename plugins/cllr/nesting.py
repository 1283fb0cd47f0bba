"""cllr's prefix-nesting stage (adaptemb's extension; see ``plugins/cllr/compressor.py``): after the proximal fit, L's row space
is re-based, ``W = B L``, so that its short prefixes are trained to stand alone: B (r × r) is fitted by a soft-target
NCE that asks each prefix's neighbour distribution to match the full code's (self-distillation of L's own codes,
Matryoshka style), through ``adaptemb.train``; then ``block_spread_order`` orders dimensions by spread inside each
block between trained prefixes.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from adaptemb import resolve_device, train
from adaptemb_plugins.cllr.model import Settings, heavy_ball, loop_threads, small_eigh, training_config


def nest_prefixes(directions: torch.Tensor, mean: torch.Tensor, anchors: torch.Tensor, candidates: torch.Tensor,
                  anchor_ids: torch.Tensor, settings: Settings) -> tuple[torch.Tensor, dict[str, Any]]:
    """Re-base L's row space so that its prefixes are trained codes: returns (B (r × r), report); codes ``B L x̃``.

    The teacher is the full code ``L x̃`` (``directions`` = L, r × d, spread-ordered, frozen). For a batch of
    ``anchors`` (fit rows and the pairs' queries) against a sample of ``candidates`` (fit rows), the teacher's
    neighbour distribution ``softmax(cos_L(a, c) / teacher_temperature)`` is the soft target of each prefix
    ``p`` in ``settings.prefixes`` (those below r): the loss is the mean over prefixes of
    ``−Σ_c p_T(c|a) log softmax(cos_{(B L)[:p]}(a, c) / prefix_temperature)``; a candidate that is the anchor
    itself (``anchor_ids[a] == c``, -1 for none) is left out. B starts at the identity and takes
    ``prefix_steps`` heavy-ball SGD steps (the loop's lr and momentum). Everything works on the r-dim teacher
    codes, so a step costs O(batch · r²) whatever d is. B is a left factor: zero columns of L stay zero and the
    rank cannot grow.
    """
    r = directions.shape[0]
    prefixes = sorted({p for p in settings.prefixes if 1 <= p < r})
    if not prefixes or settings.prefix_steps <= 0:
        return torch.eye(r), {}
    device = resolve_device(settings.device)
    started = time.perf_counter()
    with loop_threads(settings, device):
        za, zc = (_codes(rows, mean, directions).to(device) for rows in (anchors, candidates))
        nesting = _PrefixNesting(za, zc, anchor_ids.to(device), prefixes, settings)
        probe = [t.to(device) for t in next(_NestingBatches(len(za), len(zc), settings, settings.seed + 3).epoch())]
        before = nesting.probe_loss(probe)
        report = train(nesting, _NestingBatches(len(za), len(zc), settings, settings.seed + 1),
                       training_config(settings), description="cllr nesting", steps=settings.prefix_steps,
                       optimizer=heavy_ball(settings))
        after = nesting.probe_loss(probe)
    return nesting.basis.detach().cpu(), {
        "prefixes": prefixes, "steps": report.steps, "seconds": round(time.perf_counter() - started, 3),
        "loss_first": round(before, 6), "loss_last": round(after, 6)}


class _PrefixNesting(nn.Module):
    """B (r × r, from the identity) and the frozen teacher codes of the anchors (``za``) and candidates (``zc``)
    it learns from; ``training_loss`` of a batch (anchor ids, candidate ids) is ``nest_prefixes``' loss."""

    def __init__(self, za: torch.Tensor, zc: torch.Tensor, anchor_ids: torch.Tensor, prefixes: list[int],
                 settings: Settings) -> None:
        super().__init__()
        self.basis = nn.Parameter(torch.eye(za.shape[1], device=za.device))
        for name, value in {"za": za, "zc": zc, "ta": F.normalize(za, dim=1), "tc": F.normalize(zc, dim=1),
                            "ids": anchor_ids}.items():
            self.register_buffer(name, value)
        self.prefixes, self.settings = prefixes, settings

    def training_loss(self, batch: Sequence[torch.Tensor], step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        del step
        ai, ci = batch
        s = self.settings
        itself = self.ids[ai][:, None] == ci[None, :]
        with torch.no_grad():
            target = F.softmax((self.ta[ai] @ self.tc[ci].T / s.teacher_temperature).masked_fill(itself, -torch.inf), 1)
        sa, sc = self.za[ai] @ self.basis.T, self.zc[ci] @ self.basis.T
        loss = sa.new_zeros(())
        for p in self.prefixes:
            logits = F.normalize(sa[:, :p], dim=1) @ F.normalize(sc[:, :p], dim=1).T / s.prefix_temperature
            log_q = F.log_softmax(logits.masked_fill(itself, -torch.inf), dim=1)
            loss = loss - (target * log_q.masked_fill(itself, 0.0)).sum(1).mean() / len(self.prefixes)
        return loss, {}

    @torch.no_grad()
    def probe_loss(self, batch: Sequence[torch.Tensor]) -> float:
        """The loss of one fixed batch (the report's ``loss_first`` / ``loss_last``: before and after the fit)."""
        return float(self.training_loss(batch, 0)[0])


class _NestingBatches:
    """``adaptemb.train``'s batches for the nesting stage: per step, ``batch_size`` anchor ids and
    ``prefix_candidates`` candidate ids, each a fresh permutation's head drawn from a ``seed`` generator."""

    def __init__(self, anchors: int, candidates: int, settings: Settings, seed: int) -> None:
        self.anchors, self.candidates = anchors, candidates
        self.sizes = (settings.batch_size, min(settings.prefix_candidates, candidates))
        self.generator = torch.Generator().manual_seed(seed)
        self.steps_per_epoch = settings.prefix_steps

    def epoch(self) -> Iterator[list[torch.Tensor]]:
        for _ in range(self.steps_per_epoch):
            yield [torch.randperm(self.anchors, generator=self.generator)[: self.sizes[0]],
                   torch.randperm(self.candidates, generator=self.generator)[: self.sizes[1]]]

    def validation(self) -> Iterator[list[torch.Tensor]]:
        return iter(())


def _codes(rows: torch.Tensor, mean: torch.Tensor, directions: torch.Tensor) -> torch.Tensor:
    return torch.cat([(rows[i : i + 65536].float() - mean) @ directions.T for i in range(0, len(rows), 65536)])


def block_spread_order(weight: torch.Tensor, covariance: torch.Tensor, prefixes: Sequence[int],
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Within each block between consecutive trained prefixes, rotate the rows (orthogonally, block by block) to
    the principal axes of that block's codes: dimensions are ordered by spread inside every block, and every
    trained prefix keeps its span and its cosine scores exactly. Returns (W, each dimension's relative std)."""
    bounds = [0, *sorted({p for p in prefixes if 0 < p < len(weight)}), len(weight)]
    w = weight.double()
    blocks = []
    for start, stop in itertools.pairwise(bounds):
        block = w[start:stop]
        variances, rotation = small_eigh(block @ covariance.double() @ block.T)
        order = torch.argsort(variances, descending=True)
        rotation = rotation[:, order]
        pivot = rotation.abs().argmax(dim=0)
        rotation = rotation * torch.sign(rotation[pivot, torch.arange(len(order))])[None, :]
        blocks.append(rotation.T @ block)
    out = torch.cat(blocks).to(weight.dtype)
    spread = (out.double() @ covariance.double() * out.double()).sum(dim=1).clamp_min(0).sqrt()
    return out, spread.float()
