"""Model shapes, a training step that learns, and make_model's errors."""

from __future__ import annotations

import pytest
import torch

from feedlab.models import (
    SRCNN,
    SmallResNet,
    backward_step,
    forward,
    make_model,
    make_train_step,
    train_step,
)


def test_srcnn_upsamples_to_hr():
    torch.manual_seed(0)
    m = SRCNN()
    lr = torch.rand(2, 3, 8, 10)
    assert m(lr).shape == (2, 3, 16, 20)
    assert m(lr, size=(24, 30)).shape == (2, 3, 24, 30)
    assert SRCNN(scale=1)(lr).shape == lr.shape
    assert [c.kernel_size for c in (m.conv1, m.conv2, m.conv3)] == [(9, 9), (5, 5), (5, 5)]
    assert (m.conv1.out_channels, m.conv2.out_channels) == (64, 32)


def test_small_resnet_logits():
    m = SmallResNet(num_classes=7)
    assert m(torch.rand(3, 3, 16, 16)).shape == (3, 7)


@pytest.mark.parametrize("name", ["srcnn", "resnet"])
def test_training_lowers_loss_on_fixed_batch(name):
    torch.manual_seed(0)
    model = make_model(name, **({"width": 8} if name == "resnet" else {}))
    loss_fn, opt = make_train_step(model, "cpu", lr=3e-3)
    if name == "srcnn":
        x, y = torch.rand(4, 3, 8, 8), torch.rand(4, 3, 16, 16)
    else:
        x, y = torch.rand(8, 3, 12, 12), torch.arange(8) % 10
    first = forward(model, x, y, loss_fn).item()
    for _ in range(5):
        loss = train_step(model, opt, x, y, loss_fn)
    assert loss.requires_grad is False
    assert forward(model, x, y, loss_fn).item() < first


def test_phases_are_separate():
    model = make_model("srcnn")
    _, opt = make_train_step(model)
    loss = forward(model, torch.rand(1, 3, 4, 4), torch.rand(1, 3, 8, 8))
    assert model.conv1.weight.grad is None
    backward_step(loss, opt)
    assert model.conv1.weight.grad is not None


def test_none_model_is_a_no_op():
    assert make_model("none") is None
    assert make_train_step(None) == (None, None)
    assert forward(None, torch.zeros(1), torch.zeros(1)) is None
    backward_step(None, None)
    assert train_step(None, None, torch.zeros(1), torch.zeros(1)) is None


def test_make_model_errors_name_allowed_values():
    with pytest.raises(ValueError, match="none, srcnn, resnet"):
        make_model("vgg")
    assert isinstance(make_model("ResNet", num_classes=3), SmallResNet)
