"""The step a pipeline feeds, and where it runs (re-exported by :mod:`feedlab.pipeline`): the model names
a :class:`~feedlab.pipeline.PipelineSpec` may carry, the device choice, and the one training step's pieces
(:func:`make_training`: model, loss and the one optimizer, Adam at lr 1e-3, from
``feedlab.models.make_train_step``; :func:`train_step`, which is :func:`feedlab.models.train_step`)."""

from __future__ import annotations

# model names a spec may carry: feedlab.models names plus lighter variants.
# "srcnn_small" (16/8 filters instead of 64/32, ~9x fewer FLOPs) stands in on a
# CPU, where the full SRCNN step takes seconds per batch and leaves no loader
# question to ask; "auto" is srcnn with CUDA, srcnn_small without.
MODEL_VARIANTS = {"none": ("none", {}), "srcnn": ("srcnn", {}),
                  "srcnn_small": ("srcnn", {"n1": 16, "n2": 8}), "resnet": ("resnet", {}),
                  "srcnn_wide": ("srcnn", {"n1": 256, "n2": 128})}  # a GPU-bound step (choose_gpu_workload)


def default_device():
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_device(device, check: bool = True) -> str:
    """'auto'/empty: CUDA if present, else CPU; a missing CUDA is a ValueError unless not ``check``."""
    if device in (None, "", "auto"):
        return str(default_device())
    if check and str(device).startswith("cuda") and str(default_device()) == "cpu":
        raise ValueError(f"device {device!r}: this machine has no CUDA device (use cpu or auto)")
    return str(device)


def resolve_model_name(name: str, device=None) -> str:
    """``"auto"`` → ``"srcnn"`` on CUDA, ``"srcnn_small"`` on a CPU; other names unchanged."""
    if name == "auto":
        device = device if device is not None else default_device()
        return "srcnn" if str(device).startswith("cuda") else "srcnn_small"
    if name not in MODEL_VARIANTS:
        raise ValueError(f"model {name!r}: one of auto, {', '.join(MODEL_VARIANTS)}")
    return name


def build_model(name: str):
    from feedlab.models import make_model

    base, opts = MODEL_VARIANTS[resolve_model_name(name)]
    return make_model(base, **opts)


def make_training(model, device):
    """``(model, loss_fn, optimizer)`` on ``device``: the one training step's pieces.
    ``model`` is a name (see :data:`MODEL_VARIANTS`) or a module; ``"none"`` → Nones.
    The optimizer is ``feedlab.models.make_train_step``'s (Adam, lr 1e-3) when the
    model has trainable parameters."""
    from feedlab.models import make_train_step

    if isinstance(model, str):
        model = build_model(resolve_model_name(model, device))
    if model is None:
        return None, None, None
    own_loss = getattr(model, "loss_fn", None)  # else models.step_loss picks one from the batch
    if not any(p.requires_grad for p in model.parameters()):
        model.to(device)
        return model, own_loss, None
    _loss, optimizer = make_train_step(model, device)
    return model, own_loss, optimizer


def train_step(model, optimizer, x, y, loss_fn=None):
    """The one training step, :func:`feedlab.models.train_step`: forward, loss (the choice is
    :func:`feedlab.models.step_loss`'s), backward, optimizer step; returns the detached loss."""
    from feedlab.models import train_step as step

    return step(model, optimizer, x, y, loss_fn)
