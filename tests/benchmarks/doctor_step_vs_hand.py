"""Benchmark, not a test: the doctor's step cost and end-to-end prediction for a user's
own loader against a hand timing (issue 22). An ImageFolder-like set of JPEGs,
RandomResizedCrop + flip + ToTensor + Normalize, a resnet18 step on CPU.

    python tests/benchmarks/doctor_step_vs_hand.py [--images 200] [--batch 32] [--workers 2] [--crop 160]

Prints the doctor's step cost per sample beside a hand timing on full batches (the
ratio should be within ±20%), and its predicted rate for the loader as built beside the
rate measured by hand over full passes (±25%). Say whether the machine was busy.
"""

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torchvision
from PIL import Image
from torch.utils.data import DataLoader
from torchvision import transforms as T

from feedlab.doctor import diagnose_loader, render_user
from feedlab.monitor import LoadWindow


def build(root: Path, n: int) -> None:
    rng = np.random.default_rng(0)
    for k in range(n):
        d = root / f"class{k % 4}"
        d.mkdir(parents=True, exist_ok=True)
        h, w = rng.integers(200, 400, 2)
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(d / f"{k}.jpg", quality=90)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=200)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--crop", type=int, default=160)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="doctor-bench-"))
    build(tmp, a.images)
    tf = T.Compose([T.RandomResizedCrop(a.crop), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    ds = torchvision.datasets.ImageFolder(str(tmp), transform=tf)

    def make_loader():
        return DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers)

    model = torchvision.models.resnet18(num_classes=4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(batch):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    window = LoadWindow()
    rep = diagnose_loader(make_loader(), step=step, repeats=a.repeats, step_trials=("channels_last",))
    print(render_user(rep))
    from feedlab.timing import torch_threads

    threads = torch.get_num_threads()    # the user's loop runs its step at its own threads
    # hand timing: the step on full batches, at the threads the loop gives it
    full = [b for b in DataLoader(ds, batch_size=a.batch, num_workers=0) if len(b[1]) == a.batch][:4]
    with torch_threads(threads):
        step(full[0])
        per = []
        for _ in range(a.repeats):
            for b in full:
                t0 = time.perf_counter()
                step(b)
                per.append((time.perf_counter() - t0) / a.batch)
    hand_step = float(np.median(per))
    # hand timing: the loader as built with the step, whole passes after the first
    loader = make_loader()
    rates = []
    with torch_threads(threads):
        for p in range(a.repeats + 1):
            t0, n = time.perf_counter(), 0
            for b in loader:
                step(b)
                n += len(b[1])
            if p:
                rates.append(n / (time.perf_counter() - t0))
    hand_rate = float(np.median(rates))
    model_rows = [r for r in rep["stages"] if r["stage"] == "model" and f"{threads} thread" in r["variant"]]
    doc_step = model_rows[0]["s_per_sample"] if model_rows else float("nan")
    load = window.summary()
    print(f"\nstep per sample: doctor {doc_step * 1e3:.2f} ms, by hand on full batches {hand_step * 1e3:.2f} ms "
          f"(ratio {doc_step / hand_step:.2f}; {threads} thread(s))")
    pred = rep["predicted_samples_per_s"]
    print(f"end to end: doctor predicted {pred:.1f} samples/s, measured by hand over whole passes "
          f"{hand_rate:.1f} (ratio {pred / hand_rate:.2f})")
    print(f"machine: other processes used {load.get('other_cpu_cores', float('nan')):.2f} of "
          f"{load.get('usable_cores')} cores during the run (busy: {load.get('busy')})")


if __name__ == "__main__":
    main()
