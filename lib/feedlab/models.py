"""Compute to overlap with loading: small models and phase-separable training steps.

* ``SRCNN`` (Dong et al., 2014/2016): three convolutions, 9-5-5 kernels with
  64 and 32 filters, on the low-resolution image upsampled bicubically to
  the high-resolution size inside ``forward``; the write-up this project
  follows trained it on DIV2K patch pairs.
* ``SmallResNet``: a CIFAR-sized residual network (a 3×3 stem, three stages
  of basic blocks, global average pooling) for the classification loaders.
* ``make_model('none' | 'srcnn' | 'resnet')``: ``'none'`` returns ``None``,
  meaning "load only"; every helper below accepts it and does nothing.

The one training step of feedlab lives here (``timing.run_epoch``, ``pipeline.train_step``
and the doctor all call it). It is split so a timer can put each phase on its own clock:
``loss = forward(model, x, y)`` then ``backward_step(loss, optimizer)``; ``train_step``
does both. The loss choice is :func:`step_loss`'s: the given ``loss_fn``; else MSE when
the output has the target's shape (an SR pair: a model whose ``forward`` takes ``size``,
as SRCNN's does, is asked for the target's size, so a set of any scale trains on its MSE),
cross-entropy for integer labels, and the output's mean when there is no usable target.
"""

from __future__ import annotations

import functools
import inspect
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "MODEL_NAMES",
    "SRCNN",
    "SmallResNet",
    "backward_step",
    "default_loss",
    "forward",
    "make_model",
    "make_train_step",
    "step_loss",
    "train_step",
]

MODEL_NAMES = ("none", "srcnn", "resnet")


class SRCNN(nn.Module):
    """SRCNN 9-5-5: patch extraction (9×9, 64), non-linear mapping (5×5, 32), reconstruction (5×5).

    ``forward(lr)`` upsamples the low-resolution batch by ``scale`` with
    bicubic interpolation (or to ``size`` when given) and returns the
    high-resolution estimate of the same spatial size. ``scale=1`` skips the
    interpolation (input already at HR size). Padding keeps the size, so the
    output lines up with the HR target (the paper used valid convolutions and
    a cropped target instead).
    """

    def __init__(self, num_channels: int = 3, scale: int = 2, f1: int = 9, f2: int = 5, f3: int = 5,
                 n1: int = 64, n2: int = 32):
        super().__init__()
        self.scale = scale
        self.conv1 = nn.Conv2d(num_channels, n1, f1, padding=f1 // 2)
        self.conv2 = nn.Conv2d(n1, n2, f2, padding=f2 // 2)
        self.conv3 = nn.Conv2d(n2, num_channels, f3, padding=f3 // 2)
        self.loss_fn: nn.Module = nn.MSELoss()

    def forward(self, x: torch.Tensor, size: tuple[int, int] | None = None) -> torch.Tensor:
        if size is not None:
            if tuple(x.shape[-2:]) != tuple(size):  # already at the size asked: nothing to resize
                x = F.interpolate(x, size=size, mode="bicubic", align_corners=False)
        elif self.scale != 1:
            x = F.interpolate(x, scale_factor=self.scale, mode="bicubic", align_corners=False)
        x = F.relu(self.conv1(x), inplace=True)
        x = F.relu(self.conv2(x), inplace=True)
        return self.conv3(x)


class _BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x), inplace=True)


class SmallResNet(nn.Module):
    """A CIFAR-style ResNet: 3×3 stem, stages of basic blocks (widths ``width``, 2×, 4×), avg-pool, linear.

    ``blocks=(1, 1, 1)`` (the default) is an 8-layer net, cheap on a CPU;
    ``(3, 3, 3)`` is ResNet-20. Works at any input size ≥ 8 pixels.
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 3, width: int = 16,
                 blocks: tuple[int, ...] = (1, 1, 1)):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True)
        )
        layers = []
        cin = width
        for i, nblocks in enumerate(blocks):
            cout = width * 2**i
            for b in range(nblocks):
                layers.append(_BasicBlock(cin, cout, 2 if (b == 0 and i > 0) else 1))
                cin = cout
        self.stages = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, num_classes)
        self.loss_fn: nn.Module = nn.CrossEntropyLoss()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)


_BUILDERS: dict[str, Callable[..., nn.Module]] = {"srcnn": SRCNN, "resnet": SmallResNet}


def make_model(name: str, **kw) -> nn.Module | None:
    """``'srcnn'`` -> ``SRCNN(**kw)``, ``'resnet'`` -> ``SmallResNet(**kw)``, ``'none'`` -> ``None`` (load only)."""
    key = (name or "").lower()
    if key == "none":
        if kw:
            raise TypeError(f"make_model('none') takes no options, got {sorted(kw)}")
        return None
    try:
        builder = _BUILDERS[key]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; one of: {', '.join(MODEL_NAMES)}") from None
    return builder(**kw)


def default_loss(model: nn.Module | None) -> nn.Module | None:
    """The model's own criterion: MSE for SRCNN, cross-entropy for SmallResNet; ``None`` for a
    model without one (then :func:`step_loss` chooses from the batch)."""
    if model is None:
        return None
    return getattr(model, "loss_fn", None)


def make_train_step(model: nn.Module | None, device="cpu", lr: float = 1e-3):
    """Move ``model`` to ``device`` in training mode; return ``(loss_fn, optimizer)`` (Adam).

    ``(None, None)`` for the ``'none'`` model.
    """
    if model is None:
        return None, None
    model.to(device)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    return default_loss(model), optimizer


@functools.lru_cache(maxsize=64)
def _takes_size(cls: type) -> bool:
    try:
        return "size" in inspect.signature(cls.forward).parameters
    except (TypeError, ValueError, AttributeError):
        return False


def _is_image_batch(t) -> bool:
    return isinstance(t, torch.Tensor) and t.dim() == 4


def step_loss(out: torch.Tensor, y: torch.Tensor | None, loss_fn: Callable | None = None) -> torch.Tensor:
    """The loss of one step: ``loss_fn(out, y)`` when given; else MSE when ``out`` has the
    target's shape, cross-entropy for integer labels, and ``out``'s mean when there is no
    target (images without labels) or none that fits."""
    if y is not None and loss_fn is not None:
        return loss_fn(out, y)
    if y is not None and getattr(out, "shape", None) == getattr(y, "shape", None):
        return F.mse_loss(out, y)
    if y is not None and y.dtype in (torch.int64, torch.int32):
        return F.cross_entropy(out, y.long())
    return out.float().mean()


def forward(model: nn.Module | None, x: torch.Tensor, y: torch.Tensor | None, loss_fn: Callable | None = None):
    """The forward phase: the model's output for ``x`` and its :func:`step_loss`;
    ``None`` for the ``'none'`` model.

    With an image target (4-D ``y``), a model whose ``forward`` takes ``size`` (SRCNN)
    is asked for ``y``'s spatial size, whatever the set's scale. Returns the loss tensor
    without reading it back, so no device synchronisation happens here.
    """
    if model is None:
        return None
    if _is_image_batch(x) and _is_image_batch(y) and _takes_size(type(model)):
        out = model(x, size=tuple(y.shape[-2:]))
    else:
        out = model(x)
    return step_loss(out, y, loss_fn)


def backward_step(loss: torch.Tensor | None, optimizer: torch.optim.Optimizer | None) -> None:
    """The backward phase: clear gradients, backpropagate, step. No-op for the ``'none'`` model."""
    if loss is None or optimizer is None:
        return
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def train_step(model, optimizer, x, y, loss_fn=None):
    """``forward`` then ``backward_step``; returns the detached loss (no sync) or ``None``."""
    loss = forward(model, x, y, loss_fn)
    backward_step(loss, optimizer)
    return None if loss is None else loss.detach()
