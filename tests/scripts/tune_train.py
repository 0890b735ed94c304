"""A tiny training script, run unmodified by notebook 16's scenario (g) and the tuner's --script tests:
a synthetic image set decoded in Python (a few hundred µs a sample), a small conv net, SGD, a few epochs.
It downloads nothing and writes nothing."""

import argparse

import torch
from torch.utils.data import DataLoader, Dataset


class Synthetic(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.rand(3, 48, 48, generator=g)
        for _ in range(3):                       # an augmentation's worth of CPU
            x = torch.nn.functional.avg_pool2d(x[None], 3, 1, 1)[0].flip(-1)
        return x, i % 10


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--samples", type=int, default=2048)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    loader = DataLoader(Synthetic(args.samples), batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(4),
                              torch.nn.Flatten(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    for epoch in range(args.epochs):
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
        print(f"epoch {epoch} done")


if __name__ == "__main__":
    main()
