"""The settings the doctor advises, in one table: for each, the code line that applies it and the reason
it is predicted to help.

:func:`feedlab.doctor.answer.code_line` prints the code line, :func:`feedlab.doctor.predict.why` the
reason; every setting :func:`feedlab.doctor.predict.candidates` can change has a row here. A row's
``code`` reads the advised value and the report (``data``: the data folder, ``cuda``); its ``reason``
reads a :class:`Change`: the spec before and after, their stage costs (``predict.costs``: (wall, cpu)
seconds per sample by stage), the prediction before (its ``bound_stage``) and the machine's effective
cores. Pure words: nothing here prices or measures.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from feedlab.gpu_decode import DEVICE_DECODERS

from .report_fields import Report


class Change(NamedTuple):
    """One advised change, as its reason reads it."""

    old: Any                      # the spec before (a PipelineSpec)
    new: Any                      # the spec after
    before: dict                  # predict.costs(table, old)
    after: dict                   # predict.costs(table, new)
    base: dict                    # predict.predict(table, old)
    cores: float                  # the machine's effective cores


class Setting(NamedTuple):
    code: Callable[[Any, Report], str]   # (value, report) -> the command or code line that applies it
    reason: Callable[[Change], str]      # the change -> why it is predicted to help


def _us(x: float) -> str:
    return f"{x * 1e6:.0f} µs"


def _data(rep: Report) -> str:
    return rep.data or "DIR"


def _stage(stage: str) -> Callable[[Change], str]:
    """The reason "<stage> a → b per sample"."""
    return lambda c: f"{stage} {_us(c.before[stage][0])} → {_us(c.after[stage][0])} per sample"


def _workers_reason(c: Change) -> str:
    if c.new.num_workers == 0:
        return ("no worker processes: every stage runs in the main process, without the hand-over, "
                "its receive and the workers' start-up")
    return (f"{c.base['bound_stage']} bounds it; {c.new.num_workers} workers on "
            f"{c.cores:.1f} effective cores build batches in parallel")


def _decode_reason(c: Change) -> str:
    if c.new.decode_backend in DEVICE_DECODERS:
        return (f"decode {_us(c.before['decode'][0])} per sample in the workers → "
                f"{_us(c.after['h2d'][0] - c.before['h2d'][0])} per image on the GPU, in the main process beside the copy")
    return _stage("decode")(c)


def _format_reason(c: Change) -> str:
    o = c.before["read"][0] + c.before["decode"][0]
    n = c.after["read"][0] + c.after["decode"][0]
    return f"read+decode {_us(o)} → {_us(n)} per sample"


def _loader_reason(c: Change) -> str:
    if c.new.loader in ("ring", "dataloader") and c.old.loader in ("ring", "dataloader"):
        return (f"the main process's hand-over {_us(c.before['receive'][0])} → {_us(c.after['receive'][0])} per "
                f"sample ({'a shared-memory ring slot' if c.new.loader == 'ring' else 'a pickled batch'} per batch)")
    o = sum(c.before[s][0] for s in ("read", "decode", "transform", "collate"))
    return (f"read to batch {_us(o)} → {_us(c.after['read'][0])} per sample: loader {c.new.loader} reads whole "
            "batches in this process (no workers, no collate, no hand-over)")


SETTINGS: dict[str, Setting] = {
    "num_workers": Setting(
        lambda v, rep: f"DataLoader(..., num_workers={v}{', pin_memory=True' if rep.cuda else ''})",
        _workers_reason),
    "pin_memory": Setting(lambda v, rep: f"DataLoader(..., pin_memory={v})", _stage("h2d")),
    "batch_size": Setting(lambda v, rep: f"DataLoader(..., batch_size={v})", _stage("model")),
    "format": Setting(
        lambda v, rep: f"python -m data_prep pack {_data(rep)} --to {v}   # then read it with --format {v}",
        _format_reason),
    "decode": Setting(lambda v, rep: f"decode={v}   (python -m feedlab.doctor --data {_data(rep)} --decode {v})",
                      _decode_reason),
    "loader": Setting(
        lambda v, rep: (f"loader={v!r}   (feedlab.pipeline.make_loader(dataset, PipelineSpec(..., loader={v!r})); "
                        f"python -m feedlab.bench --data {_data(rep)} --loader-kind {v})"),
        _loader_reason),
    "collate": Setting(
        lambda v, rep: f"collate={v}   (feedlab.pipeline.make_collate({v!r}) as the DataLoader's collate_fn)",
        _stage("collate")),
}
