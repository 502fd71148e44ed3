"""APO's Safe Manifold in verl: the reference model's K most likely tokens at each position, computed in the
reference worker's own forward pass and handed to the actor's loss in the same process.

APO (:mod:`sagerl.objective.apo`) pulls the policy towards the reference's top-K tokens on the tokens of wrong
completions, so the actor's loss needs, per position, the reference's top-K ids. verl 0.9.1's reference worker
computes the reference's log-probs of the sampled tokens, and its trainer (``RayPPOTrainer._compute_ref_log_prob``)
keeps only those. :class:`SAGEReferenceWorker` (verl's ``TrainingWorker`` for the reference, installed as
``ActorRolloutRefWorker.ref_worker_cls``) runs the same reference pass with verl's top-K hook on when the actor in its
process trains with APO: the FSDP engine hands the pass's logits to :func:`reference_topk_outputs`, which returns the
top-K ids and probabilities per packed token; the worker keeps them in :data:`REFERENCE_TOPK`, keyed by each
sequence's token ids, and returns verl's output unchanged. The actor's loss reads them back for the sequences of each
micro-batch (:meth:`ReferenceTopK.take`): no extra forward pass, nothing added to what travels through Ray.

This needs the reference and the actor in one process, as verl places them by default (one colocated worker per
GPU holds the actor, the rollout and the reference); a reference in a worker group of its own leaves the actor's
store empty, and the first update raises :class:`~sagerl.errors.ConfigError` saying so.
"""

from __future__ import annotations

from functools import partial

import torch
from verl.single_controller.base.decorator import make_nd_compute_dataproto_dispatch_fn, register
from verl.utils import tensordict_utils as tu
from verl.workers.engine_workers import TrainingWorker

from sagerl.errors import ConfigError

TOPK_ID = "sage_ref_topk_id_{}"
"""The reference pass's output key of its k-th most likely token id at each packed position."""
TOPK_PROB = "sage_ref_topk_prob_{}"
"""The reference pass's output key of that token's probability (at the sampling temperature)."""


def _rows(input_ids: torch.Tensor) -> list[torch.Tensor]:
    """The token ids of each sequence of a nested (jagged) ``input_ids``."""
    offsets = input_ids.offsets().tolist()
    values = input_ids.values()
    return [values[a:b] for a, b in zip(offsets[:-1], offsets[1:], strict=True)]


class ReferenceTopK:
    """The reference's top-K ids and probabilities of the last reference pass in this process, by sequence.

    Attributes:
        k: the K the actor asked for (:meth:`request`); None while no actor in this process trains with APO.
    """

    def __init__(self) -> None:
        self.k: int | None = None
        self._by_sequence: dict[bytes, tuple[torch.Tensor, torch.Tensor]] = {}

    def request(self, k: int | None) -> None:
        """Ask the reference pass of this process for its top-``k`` (None: stop asking)."""
        self.k = k
        self._by_sequence.clear()

    def put(self, input_ids: torch.Tensor, ids: torch.Tensor, probs: torch.Tensor) -> None:
        """Keep a reference pass's top-K: ``input_ids`` nested (B sequences, nnz tokens), ``ids`` and ``probs``
        (nnz, K), in the packed order of ``input_ids``. Replaces what an earlier pass kept."""
        self._by_sequence.clear()
        start = 0
        for row in _rows(input_ids):
            end = start + row.numel()
            self._by_sequence[row.cpu().numpy().tobytes()] = (ids[start:end], probs[start:end])
            start = end

    def take(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The top-K ids (nnz, K) int64 and probabilities (nnz, K) of the sequences of ``input_ids`` (nested), in its
        packed order.

        Raises:
            ConfigError: a sequence the last reference pass of this process did not see.
        """
        ids, probs = [], []
        for row in _rows(input_ids):
            found = self._by_sequence.get(row.cpu().numpy().tobytes())
            if found is None:
                raise ConfigError(
                    "APO: the reference's top-K tokens of this batch are not in the actor's process: verl ran no "
                    "reference pass here (set actor.use_kl_loss=True, any kl_loss_coef >= 0, so that it runs), or "
                    "the reference runs in a worker group of its own (APO needs it colocated with the actor, "
                    "verl's default), or the actor is a LoRA adapter whose reference is the actor without it "
                    "(verl's ref_in_actor: not supported for APO)"
                )
            ids.append(found[0])
            probs.append(found[1])
        device = input_ids.device
        return torch.cat(ids).to(device), torch.cat(probs).to(device)


REFERENCE_TOPK = ReferenceTopK()
"""This process's store (the actor asks for it in ``set_loss_fn``; the reference worker fills it)."""


def reference_topk_outputs(
    k: int,
    model_output: dict | None = None,
    data=None,
    dp_group=None,
    student_logits: torch.Tensor | None = None,
):
    """verl's top-K hook on the reference pass: with ``student_logits`` (1, nnz, V), the pass's temperature-scaled
    logits, the ``k`` most likely ids and their probabilities, (1, nnz) each (:data:`TOPK_ID`, :data:`TOPK_PROB`);
    without, the (zero) loss verl's forward-only step asks a loss function for."""
    if student_logits is None:
        return torch.zeros(()), {}
    top = torch.log_softmax(student_logits[0].float(), dim=-1).topk(k, dim=-1)
    outputs = {TOPK_ID.format(j): top.indices[None, :, j] for j in range(k)}
    outputs.update({TOPK_PROB.format(j): top.values[None, :, j].exp() for j in range(k)})
    return outputs


class SAGEReferenceWorker(TrainingWorker):
    """verl's ``TrainingWorker`` for the reference model; when this process's actor trains with APO, its reference
    pass also keeps the reference's top-K tokens (module docstring). Otherwise verl's, unchanged."""

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="train"), blocking=False)
    def infer_batch(self, data):
        k = REFERENCE_TOPK.k
        if k is None:
            return super().infer_batch(data)
        input_ids = data["input_ids"]
        tu.assign_non_tensor(data, distillation_use_topk=True, compute_loss=True)
        saved, self.loss_fn = self.loss_fn, partial(reference_topk_outputs, k)
        try:
            output = super().infer_batch(data)
        finally:
            self.loss_fn = saved
        if output is None:  # not this rank's to return
            return output
        ids = [output.pop(TOPK_ID.format(j)) for j in range(k)]
        probs = [output.pop(TOPK_PROB.format(j)) for j in range(k)]
        REFERENCE_TOPK.put(
            input_ids,
            torch.stack([t.values() for t in ids], dim=-1).long(),
            torch.stack([t.values() for t in probs], dim=-1).float(),
        )
        return output
