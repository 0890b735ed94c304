"""The batch stages timed where the loop runs them: the collate and the loop's uint8 → float conversion.

Timed alone, on the same 64 items collated again and again (source bytes hot in the cache, the batch's
memory handed straight back by the allocator) and on batches copied ahead of the loop, these two stages
cost about half of what they cost in a ``num_workers=0`` DataLoader loop: on a 2-core box ``fast_cl``'s
collate read 3.7 µs a sample alone and 8-9 in the loop, the conversion of its uint8 batch 6 µs and 9-12
(CPU time, npy_mmap + PairFlip, batch 64), and notebook 10's ``collate=fast_cl`` step was predicted at
×1.8-2.1 its measured rate on cpu-2c (28,885 against 15,800 samples/s; #46). Here each batch's items are
made fresh by the spec's own transform (as the loop's fetch makes them), collated, then converted as
``timing.run_epoch`` converts them, the previous batch and its floats held until the next replace them
(as the loop holds them): what the loop pays, per stage, from the costs the probe measured.

Checked against the loop itself (npy_mmap + PairFlip, batch 64, 0 workers, one thread; CPU µs a sample,
median of 6 rounds on a busy 2-core box, 2026-11-28, not a record): collate 9.9 probed / 11.6 in the loop
for ``fast_cl``, 13.9 / 15.0 for ``fast``; conversion 13.4 / 15.9 and 10.6 / 12.7; transform 34 / 35 both.
A channels-last uint8 batch converts as fast as a contiguous one (its floats stay channels-last, no copy).
So the loop's ``fast_cl`` is not priced apart from ``fast``: the second quiet run's +35% on that step came
with the setting it replaced measured 20% slower beside it than at its own step, the gain off by −5%
(``experiments.doctor_steps.against_drift``).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

from feedlab.errors import progress
from feedlab.timing import sync_device, to_device_float, torch_threads

from .probes import MIN_ROUND_S, calls_per_round

LOOP_BATCHES = 8   # batches a timed round (at least): one descheduling is then an eighth of a round at most
# … and a round's timed stages (collate + conversion) last at least this long: 8 batches of a fast collate are
# 5 ms (npy_mmap, batch 64, cpu-2c), one descheduling in them a whole round (as stream_stages sizes its rounds)
LOOP_ROUND_S = 2 * MIN_ROUND_S


def _fields(batch) -> tuple:
    if isinstance(batch, (list, tuple)) and len(batch) == 2:
        return batch[0], batch[1]
    return batch, None


def loop_batches(samples: Sequence[Any], transform: Callable | None, collate: Callable, batch_size: int,
                 device="cpu", threads: int | None = None, batches: int = LOOP_BATCHES, warmup: int = 1,
                 repeats: int = 3, min_round_s: float = LOOP_ROUND_S) -> dict[str, tuple[list[float], list[float]]]:
    """(wall, cpu) seconds per sample of ``collate`` and of the loop's conversion (``h2d``: each field through
    ``timing.to_device_float``, as ``run_epoch``'s h2d phase), one value per timed round of ``batches``
    batches, after ``warmup`` rounds (at least one). Each batch's ``batch_size`` items are ``transform(s)``
    of the next ``samples`` (cycled; the samples themselves where ``transform`` is None), made outside the
    clock; ``threads``: the main process's intra-op threads (None: torch's own). The last warm-up round sizes
    the timed ones: as many batches as make ``min_round_s`` of timed work (at least ``batches``)."""
    src = list(samples)
    if not src:
        raise ValueError("loop_batches: no samples to collate (measure the item stages first)")
    B, n, k = int(batch_size), len(src), 0
    out: dict[str, tuple[list[float], list[float]]] = {"collate": ([], []), "h2d": ([], [])}
    batch = x = y = None   # the loop's references: the previous batch lives until the next replaces it
    per_round = max(1, int(batches))
    with torch_threads(threads):
        for r in range(max(1, int(warmup)) + int(repeats)):
            acc = {"collate": [0.0, 0.0], "h2d": [0.0, 0.0]}
            for _ in range(per_round):
                items = []
                for _ in range(B):
                    s = src[k % n]
                    k += 1
                    items.append(transform(s) if transform is not None else s)
                t0, c0 = time.perf_counter(), time.process_time()
                batch = collate(items)
                t1, c1 = time.perf_counter(), time.process_time()
                x, y = _fields(batch)
                x = to_device_float(x, device, True)
                y = to_device_float(y, device, True)
                sync_device(device)
                t2, c2 = time.perf_counter(), time.process_time()
                acc["collate"][0] += t1 - t0
                acc["collate"][1] += c1 - c0
                acc["h2d"][0] += t2 - t1
                acc["h2d"][1] += c2 - c1
                del items
            progress()
            if r == max(1, int(warmup)) - 1:   # the last warm-up round sizes the timed ones
                one = (acc["collate"][0] + acc["h2d"][0]) / per_round
                per_round = max(per_round, calls_per_round(one, min_round_s))
            elif r >= max(1, int(warmup)):
                per = float(per_round * B)
                for name, (w, c) in acc.items():
                    out[name][0].append(w / per)
                    out[name][1].append(c / per)
    del batch, x, y
    return out


def loop_costs(doc, collate: Callable, items: Sequence[Any], threads: int | None) -> dict[str, tuple[list, list]]:
    """:func:`loop_batches` for a :class:`feedlab.doctor.Doctor`: ``items`` (the spec's samples, one batch of
    them) through the spec's own transform, on its device, at its effort's warm-up and repeats."""
    spec, effort = doc.spec, doc.effort
    transform = doc.split(spec.format, spec.decode_backend).transform
    return loop_batches(items, transform, collate, len(items), doc.device, threads, warmup=effort.warmup,
                        repeats=effort.repeats)
