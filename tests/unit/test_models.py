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
    step_loss,
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


def test_run_epoch_and_pipeline_train_step_are_one_step_on_a_scale_4_pair():
    """A scale-4 SR pair with SRCNN (built for scale 2, as pipeline.build_model does): the
    timed epoch and the doctor's step must compute the same MSE to the HR target and leave
    the same gradients; a second loss choice in either path makes this fail."""
    import copy

    from feedlab import pipeline, timing

    torch.manual_seed(0)
    x = torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8)
    y = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    xf, yf = x.float() / 255, y.float() / 255
    a = make_model("srcnn", scale=2, n1=8, n2=4)
    b = copy.deepcopy(a)
    opt_a = torch.optim.SGD(a.parameters(), lr=0.0)  # lr 0: weights stay, gradients remain
    opt_b = torch.optim.SGD(b.parameters(), lr=0.0)

    outs = []
    a.register_forward_hook(lambda m, args, out: outs.append(out.detach()))
    timing.run_epoch([(x, y)], a, "cpu", opt_a, main_threads=None)
    loss_b = pipeline.train_step(b, opt_b, xf, yf)

    assert outs[0].shape == y.shape
    loss_a = torch.nn.functional.mse_loss(outs[0], yf)
    assert torch.allclose(loss_a, loss_b, rtol=1e-6, atol=0)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.allclose(pa.grad, pb.grad, rtol=1e-5, atol=1e-8)


def test_step_loss_choices():
    out = torch.rand(2, 3, 4, 4)
    assert torch.equal(step_loss(out, out.clone()), torch.tensor(0.0))
    logits = torch.tensor([[5.0, -5.0], [-5.0, 5.0]])
    assert step_loss(logits, torch.tensor([0, 1])) < 0.01
    assert torch.equal(step_loss(out, None), out.mean())
    assert step_loss(out, torch.zeros(1), loss_fn=lambda o, t: o.sum() * 0 + 7) == 7
