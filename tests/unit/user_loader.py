"""A user's own pipeline, as `python -m feedlab.doctor --loader tests.user_loader:make_loader` imports it."""

import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        time.sleep(0.008)  # 8 ms per sample: the fetch bounds this pipeline (on a loaded 2-core box the tiny
        # step measured up to 6 ms per sample, and with a 2 ms fetch the verdict flipped half the time)
        return torch.from_numpy(np.full((3, 8, 8), i % 255, np.uint8)), i % 3


def make_loader(num_workers: int = 0):
    return DataLoader(Slow(), batch_size=8, shuffle=True, num_workers=num_workers)


_model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(192, 3))
_opt = torch.optim.SGD(_model.parameters(), lr=0.01)


def train_step(batch):
    x, y = batch
    loss = torch.nn.functional.cross_entropy(_model(x.float()), y)
    _opt.zero_grad()
    loss.backward()
    _opt.step()
