"""The hand-over benchmark's bookkeeping (fake loaders and clocks: no timing is asserted)."""

import torch

from feedlab.experiments import handover as H


class Ticks:
    def __init__(self, step):
        self.t, self.step = 0.0, step

    def __call__(self):
        self.t += self.step
        return self.t


def test_drive_counts_only_the_timed_batches_across_epochs():
    epoch = [(torch.zeros(4, 2, 2, 3, dtype=torch.uint8), torch.zeros(4, 4, 4, 3, dtype=torch.uint8))] * 3
    r = H.drive(epoch, batches=5, skip=2, clock=Ticks(1.0), cpu_clock=Ticks(0.5))
    assert r["samples"] == 20 and r["bytes"] == 5 * (48 + 192)
    assert r["wall_s"] == 1.0 and r["main_cpu_s"] == 0.5
    assert r["main_us_per_sample"] == 1e6 * 0.5 / 20


def test_targets_pick_the_best_lmdb_kind_and_judge_both():
    rows = [dict(pipeline="png_totensor_dataloader", samples_per_s=1000.0, main_us_per_sample=20.0, handover_gb_s=1, delivered_gb_s=0.1),
            dict(pipeline="lmdb_fast_dataloader", samples_per_s=3000.0, main_us_per_sample=12.0, handover_gb_s=1, delivered_gb_s=0.1),
            dict(pipeline="lmdb_ring", samples_per_s=6000.0, main_us_per_sample=6.0, handover_gb_s=8, delivered_gb_s=0.1),
            dict(pipeline="lmdb_ring", samples_per_s=5000.0, main_us_per_sample=4.0, handover_gb_s=8, delivered_gb_s=0.1, repeat=1)]
    t = H.targets(rows)
    assert t["lmdb_best"] == "lmdb_ring" and t["lmdb_vs_png"] == 5.5 and t["lmdb_vs_png_met"]
    assert t["ring_main_us_per_sample"] == 5.0 and t["ring_main_us_met"]
    assert t["lmdb_dataloader_vs_png"] == 3.0
    assert "misses" not in H.report(rows)
