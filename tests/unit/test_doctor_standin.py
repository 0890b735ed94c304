"""doctor.standin: your script's step stood in by the same CPU work (issue 46: a sleep left the workers every core,
so num_workers=1 measured ×1.45 on the stand-in and ×0.86 on dcgan itself)."""

from __future__ import annotations

import time

import torch

from feedlab.doctor.standin import StandInStep
from feedlab.monitor import usable_cores


def test_the_stand_in_uses_the_cpu_a_sleep_did_not():
    """The step's CPU is spent, not waited: a batch of 16 at 2 ms a sample costs CPU seconds (a sleep costs
    none), whatever else the machine runs (CPU seconds are not stolen by other load)."""
    step = StandInStep(0.002, 0.002, 16)
    batch = torch.zeros(16, 3)
    c0 = time.process_time()
    step(batch)
    assert time.process_time() - c0 > 0.25 * 0.002 * 16, "the stand-in waited instead of working"


def test_the_stand_in_keeps_as_many_threads_busy_as_the_step_did():
    assert StandInStep(0.001, 0.00195, 16).threads == min(2, usable_cores())
    assert StandInStep(0.001, 0.0009, 16).threads == 1
    assert StandInStep(0.001, None, 16).threads == 1            # CPU not measured: one thread
    assert StandInStep(0.001, 0.05, 16).threads == usable_cores()   # never more than the usable cores


def test_the_stand_in_leaves_torchs_thread_count_as_it_was():
    before = torch.get_num_threads()
    step = StandInStep(0.0005, 0.001, 8)
    step(torch.zeros(8, 2))
    assert torch.get_num_threads() == before
