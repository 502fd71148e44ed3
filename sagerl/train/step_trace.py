"""A step trace: short digests of everything a training run's models compute, in order, step by step, so that
two runs that should be bit-identical (the same run on two CPU kinds, under canonical kernels) can be compared
and the first operation whose bytes differ found.

Why: a published planted run reruns to other numbers on some CPU kinds (``tests/test_kernels.py``) while the
2-step fingerprint agrees; the final evaluation cannot say where the two runs parted. A trace records, for every
optimizer step: each module's output in each forward call of the policy and of the reference policy (rollout
decode steps, log-prob passes, the loss's forward; the call's inputs too), the loss's inputs (advantages,
log-probs) and value, every parameter's gradient before and after clipping, the gradient norm, and the weights
after the step. :func:`first_difference` walks two traces in the order things were computed and names the first
event whose digest differs: a module's output in a forward call (every event before it equal: the operation that
differs is in that module, or in its parent's code that ran since the previous event, such as the attention that
feeds ``o_proj``), a tensor the loss is given, the loss, a gradient (every forward event equal: the backward), the
gradient norm, a clipped gradient, or the weights (every gradient equal: the optimizer).

Digests are the first 4 bytes of a SHA-256 over a tensor's dtype, shape and bytes (a collision between two
differing tensors has odds of 2^-32 per event). Recording reads tensors and changes no numbers: the run's
weights are the same with and without it (tested). Turned on for any ``sagerl train`` by the environment
variable ``SAGERL_STEP_TRACE`` (a path: :data:`sagerl.train.run.STEP_TRACE_ENV`); the trace is written when
training ends.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback


def digest(tensor) -> int:
    """The first 4 bytes of SHA-256 over ``tensor``'s dtype, shape and bytes, as an int (any dtype, any shape)."""
    import torch

    t = tensor.detach().cpu().contiguous()
    h = hashlib.sha256(f"{t.dtype}{tuple(t.shape)}".encode())
    h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return int.from_bytes(h.digest()[:4], "big")


def _tensors(value: Any):
    """The tensors in ``value`` (a tensor, a tuple/list/dict or a ``ModelOutput`` of them), in order; caches and
    other objects are skipped."""
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):  # ModelOutput is an OrderedDict
        for v in value.values():
            yield from _tensors(v)


def _gradient_digests(model) -> dict[str, str]:
    """Each parameter's gradient digest, last parameter first (about the order the backward computes them)."""
    params = list(model.named_parameters())[::-1]
    return {name: f"{digest(p.grad):08x}" if p.grad is not None else "none" for name, p in params}


def _combined(values) -> int:
    h = hashlib.sha256()
    for v in values:
        h.update(int(v).to_bytes(4, "big"))
    return int.from_bytes(h.digest()[:4], "big")


class StepTraceCallback(TrainerCallback):
    """Records a step trace of a ``transformers.Trainer`` run (see the module's docstring) into ``path``.

    Call :meth:`attach` with the trainer before ``train()`` (it hooks the policy and, where the trainer has one,
    the reference policy); the trace is written at the end of training.

    Args:
        path: the gzipped JSON file to write.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.names: list[str] = []
        self._index: dict[str, int] = {}
        self.steps: list[dict[str, Any]] = []
        self._events = array("I")
        self._modules = array("H")
        self._gradients: dict[str, str] = {}
        self._raw_gradients: dict[str, str] = {}
        self._grad_norm = "none"

    def _name(self, name: str) -> int:
        if name not in self._index:
            self._index[name] = len(self.names)
            self.names.append(name)
        return self._index[name]

    def _record(self, name: str, value: Any) -> None:
        tensors = list(_tensors(value))
        if tensors:
            self._modules.append(self._name(name))
            self._events.append(_combined(digest(t) for t in tensors))

    def attach(self, trainer) -> None:
        """Hook every module of ``trainer.model`` (``policy.``) and of ``trainer.ref_model`` if it has one
        (``reference.``): each call's inputs (``<model>:inputs``) and every module's outputs; the trainer's
        ``compute_loss``: every tensor of the batch it is given (``loss inputs.<key>``: advantages, old and
        reference log-probs, ids, masks) and the loss; and its gradient clipping: the gradients before it and
        the norm it computes."""
        import torch

        clip = trainer._clip_grad_norm

        def clip_and_record(model):
            self._raw_gradients = _gradient_digests(model)
            norm = clip(model)
            self._grad_norm = "none" if norm is None else f"{digest(torch.as_tensor(norm)):08x}"
            return norm

        trainer._clip_grad_norm = clip_and_record
        compute_loss = trainer.compute_loss

        def compute_loss_and_record(model, inputs, *args, **kwargs):
            if isinstance(inputs, dict):  # the rollout batch: advantages, old and reference log-probs, masks
                for key, value in inputs.items():
                    self._record(f"loss inputs.{key}", value)
            loss = compute_loss(model, inputs, *args, **kwargs)
            self._record("loss", loss)
            return loss

        trainer.compute_loss = compute_loss_and_record
        models = [("policy", trainer.model)]
        if getattr(trainer, "ref_model", None) is not None:
            models.append(("reference", trainer.ref_model))
        for label, model in models:
            model.register_forward_pre_hook(
                lambda _m, args, kwargs, label=label: self._record(f"{label}:inputs", (args, kwargs)),
                with_kwargs=True,
            )
            for name, module in model.named_modules():
                module.register_forward_hook(
                    lambda _m, _args, out, key=f"{label}.{name or '(model)'}": self._record(key, out)
                )

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        self._gradients = _gradient_digests(model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        weights = _combined(digest(p) for _, p in model.named_parameters())
        self.steps.append(
            {
                "step": state.global_step,
                "modules": base64.b64encode(self._modules.tobytes()).decode(),
                "events": base64.b64encode(self._events.tobytes()).decode(),
                "raw_gradients": self._raw_gradients,
                "grad_norm": self._grad_norm,
                "gradients": self._gradients,
                "weights": f"{weights:08x}",
            }
        )
        self._events, self._modules = array("I"), array("H")
        self._gradients, self._raw_gradients, self._grad_norm = {}, {}, "none"

    def on_train_end(self, args, state, control, **kwargs):
        self.save()

    def save(self) -> None:
        """Write the trace recorded so far (atomically)."""
        from sagerl.atomic_files import atomic_path

        body = json.dumps({"names": self.names, "steps": self.steps}, separators=(",", ":")).encode()
        with atomic_path(self.path) as tmp:
            tmp.write_bytes(gzip.compress(body, mtime=0))


@dataclass(frozen=True)
class Difference:
    """Where two traces first differ: at optimizer ``step`` (-1: the number of steps), the ``what``
    (``forward``, ``gradient``, ``grad_norm``, ``clipped gradient``, ``weights``, or ``length``: other events
    or another number of them) of ``name`` (a module, a parameter); ``index``: the event's place among the step's
    forward events."""

    step: int
    what: str
    name: str
    index: int = -1

    def __str__(self) -> str:
        if self.what == "forward" and self.name.startswith("loss"):
            return f"step {self.step}: {self.name} (forward event {self.index} of the step; every event before it equal)"
        if self.what == "forward":
            return (
                f"step {self.step}: the output of {self.name} (forward event {self.index} of the step; every event "
                "before it equal, so the operation that differs is in that module, or in its parent's own code)"
            )
        if self.what == "gradient":
            return f"step {self.step}: the gradient of {self.name} (every forward event of the step equal)"
        if self.what == "grad_norm":
            return f"step {self.step}: the gradient norm (every gradient before clipping equal)"
        if self.what == "clipped gradient":
            return (
                f"step {self.step}: the clipped gradient of {self.name} (the gradients and their norm equal)"
            )
        if self.what == "weights":
            return f"step {self.step}: the weights after the optimizer step (every gradient equal)"
        return f"step {self.step}: {self.name}"


def read_trace(path: str | Path) -> dict[str, Any]:
    """A trace written by :class:`StepTraceCallback` (``names``; ``steps`` with the arrays decoded)."""
    data = json.loads(gzip.decompress(Path(path).read_bytes()))
    for step in data["steps"]:
        modules, events = array("H"), array("I")
        modules.frombytes(base64.b64decode(step["modules"]))
        events.frombytes(base64.b64decode(step["events"]))
        step["modules"], step["events"] = list(modules), list(events)
    return data


def first_difference(a: dict[str, Any], b: dict[str, Any]) -> Difference | None:
    """The first event at which traces ``a`` and ``b`` (:func:`read_trace`) differ, in the order it was computed;
    None when they are equal over the steps both hold."""
    for sa, sb in zip(a["steps"], b["steps"], strict=False):
        step = sa["step"]
        pairs = zip(sa["modules"], sa["events"], sb["modules"], sb["events"], strict=False)
        for i, (ma, ea, mb, eb) in enumerate(pairs):
            name_a, name_b = a["names"][ma], b["names"][mb]
            if name_a != name_b:
                return Difference(step, "length", f"forward event {i}: {name_a} against {name_b}", i)
            if ea != eb:
                return Difference(step, "forward", name_a, i)
        if len(sa["events"]) != len(sb["events"]):
            return Difference(
                step, "length", f"{len(sa['events'])} forward events against {len(sb['events'])}"
            )
        for name, g in sa["raw_gradients"].items():
            if sb["raw_gradients"].get(name) != g:
                return Difference(step, "gradient", name)
        if sa["grad_norm"] != sb["grad_norm"]:
            return Difference(step, "grad_norm", "")
        for name, g in sa["gradients"].items():
            if sb["gradients"].get(name) != g:
                return Difference(step, "clipped gradient", name)
        if sa["weights"] != sb["weights"]:
            return Difference(step, "weights", "")
    if len(a["steps"]) != len(b["steps"]):
        return Difference(-1, "length", f"{len(a['steps'])} steps against {len(b['steps'])}")
    return None
