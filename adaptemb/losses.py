"""Losses shared by learned methods: InfoNCE (with multi-positive masks), normalised MSE, cosine distance.

All functions take batches as rows, return a scalar tensor, and compute in float32 even under
autocast (softmax over a batch in bfloat16 is too coarse).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def info_nce(
    anchors: torch.Tensor,
    keys: torch.Tensor,
    temperature: float = 0.2,
    positives: torch.Tensor | None = None,
    *,
    normalize: bool = True,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """InfoNCE of L2-normalised ``anchors`` (B, h) against ``keys`` (B, h), in-batch negatives.

    ``positives`` is a (B, B) boolean mask of which keys are positives of which anchor (default: the
    diagonal, i.e. ``keys[i]`` is the one positive of ``anchors[i]``). With several positives the
    loss is ``-log(sum_pos exp(s/τ) / sum_all exp(s/τ))`` (supervised contrastive); anchors without
    any positive are skipped. All-zero rows are left at zero by the normalisation. ``normalize=False``
    scores the raw dot products (where their scale is what a search ranks by); ``weights`` (B,) weigh
    the anchors in the mean.
    """
    a = F.normalize(anchors.float(), dim=1) if normalize else anchors.float()
    k = F.normalize(keys.float(), dim=1) if normalize else keys.float()
    logits = a @ k.T / temperature
    if positives is None:
        positives = torch.eye(len(a), dtype=torch.bool, device=a.device)
        if weights is None:
            return F.cross_entropy(logits, torch.arange(len(a), device=a.device))
    positives = positives.to(device=logits.device, dtype=torch.bool)
    has_positive = positives.any(dim=1)
    if not bool(has_positive.any()):
        return logits.sum() * 0.0
    log_all = torch.logsumexp(logits, dim=1)
    log_pos = torch.logsumexp(logits.masked_fill(~positives, float("-inf")), dim=1)
    per_anchor = (log_all - log_pos)[has_positive]
    if weights is None:
        return per_anchor.mean()
    weights = weights.to(per_anchor)[has_positive]
    return (per_anchor * weights).sum() / weights.sum()


def normalized_mse(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``‖target − prediction‖² / ‖target − mean_batch(target)‖²``: 1 for predicting the batch mean."""
    target = target.float()
    error = (target - prediction.float()).pow(2).sum()
    spread = (target - target.mean(dim=0, keepdim=True)).pow(2).sum()
    return error / spread.clamp_min(torch.finfo(torch.float32).tiny)


def cosine_distance(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean ``1 − cos(prediction, target)`` over rows."""
    return (1.0 - F.cosine_similarity(prediction.float(), target.float(), dim=1)).mean()
