"""The doctor's calibration: contention of stages that use several threads, the CPU
capacity measured over one common window, the start setting's repeat and the error per
advice step and per worker count (pure functions, hand-written tables and rows)."""

import pytest
from test_doctor import SPEC, table

from feedlab.doctor import Machine, Stage
from feedlab.doctor import predict as PR
from feedlab.doctor.probes import capacity_of, cpu_capacity


def idle(cores=2) -> Machine:
    return Machine(cores, float(cores), False, {0: cores, 1: 1, 2: 1})


# ---------------------------------------------------------------- CPU capacity


def test_capacity_is_cpu_inside_one_window_and_never_above_the_cores():
    # 3 spinners on 2 cores reporting 0.12 s each over a 0.1 s window: a staggered clock, not 3.6 cores
    assert capacity_of([0.12, 0.12, 0.12], 0.1, 3, cores=2) == pytest.approx(2.0)
    assert capacity_of([0.05, 0.05], 0.1, 2, cores=2) == pytest.approx(1.0)
    assert capacity_of([0.1], 0.1, 1, cores=4) == pytest.approx(1.0)
    assert capacity_of([0.1], 0.0, 1) == 0.0


def test_machine_capacity_is_clipped_to_the_cores():
    m = Machine(2, 2.0, capacity={1: 1.0, 2: 1.9, 3: 2.35})
    assert m.cap(3) == pytest.approx(2.0) and m.cap(5) == pytest.approx(2.0)
    assert m.cap(1) == pytest.approx(1.0) and m.cap(2) == pytest.approx(1.9)
    assert m.speed(3) == pytest.approx(2.0 / 3)


def test_cpu_capacity_runs_its_spinners_over_a_common_window():
    cap = cpu_capacity([1, 2], seconds=0.05, repeats=1)
    assert set(cap) == {1, 2} and 0.0 < cap[1] <= 1.0 and 0.0 < cap[2] <= 2.0


# ---------------------------------------------------------------- contention


def test_one_thread_cpu_stage_alone_keeps_its_wall():
    assert PR.contended(1e-3, 1e-3, 1.0, 1, 0, idle()) == pytest.approx(1e-3)


def test_stage_measured_with_two_threads_takes_its_cpu_in_a_one_thread_worker():
    # measured in the main process with 2 threads: 1 ms wall, 2 ms CPU
    assert PR.contended(1e-3, 2e-3, 1.0, 2, 0, idle()) == pytest.approx(1e-3)
    assert PR.contended(1e-3, 2e-3, 1.0, 1, 0, idle()) == pytest.approx(2e-3)


def test_main_threads_share_the_cores_with_busy_workers():
    # 2 threads beside 2 busy workers on 2 cores: 4 busy threads, each at half a core
    assert PR.contended(1e-3, 2e-3, 1.0, 2, 2, idle()) == pytest.approx(2e-3)
    # one thread beside 1 busy worker on 2 cores: a core each
    assert PR.contended(1e-3, 1e-3, 1.0, 1, 1, idle()) == pytest.approx(1e-3)


def test_waiting_part_does_not_scale_with_contention():
    # 10% CPU, 90% waiting, beside 3 busy processes on 2 cores (speed 0.5)
    assert PR.contended(1e-3, 1e-4, 1.0, 1, 3, idle()) == pytest.approx(0.9e-3 + 0.2e-3)


def test_busy_machine_stage_priced_at_the_speed_it_gets_now():
    half = Machine(2, 1.0, capacity={1: 0.5, 2: 1.0})
    # measured on that machine at speed 0.5 (wall 2 ms, CPU 1 ms): the same now
    assert PR.contended(2e-3, 1e-3, 0.5, 1, 0, half) == pytest.approx(2e-3)
    # measured on an idle one (speed 1): twice as slow now
    assert PR.contended(1e-3, 1e-3, 1.0, 1, 0, half) == pytest.approx(2e-3)


def test_multithreaded_item_stage_is_priced_by_its_cpu_in_workers():
    t = table(decode=100e-6)
    one = PR.predict(t, SPEC.replace(num_workers=1))["predicted_samples_per_s"]
    t[("decode", "fake", "fake")] = Stage("decode", "two threads", [100e-6], [200e-6])
    two = PR.predict(t, SPEC.replace(num_workers=1))
    # the worker runs decode on one thread: 200 µs of CPU, not 100 µs of wall
    assert two["predicted_samples_per_s"] == pytest.approx(1 / (10e-6 + 200e-6 + 5e-6 + 2e-6))
    assert two["predicted_samples_per_s"] < one
