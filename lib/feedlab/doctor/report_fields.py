"""The doctor's report as typed data, in one place: :class:`Report` (every field a diagnosis can carry),
:data:`REPORT_KEYS` (the order of the JSON users read) and :data:`LATER_KEYS` (the fields a diagnosis sets
after the report is built: the loop's verdict, the measured advice, the script phase …).

The report travels as its JSON dict (``--json``, ``--report``, a saved file, the what-if's child); every
reader takes it typed through :meth:`Report.of` (a dict is read with :meth:`Report.from_dict`, a Report
passes as it is), and :meth:`Report.as_dict` gives the dict back key for key, in the same order. Adding a
field: a dataclass field here (and, for a field of the head, its place in :data:`REPORT_KEYS`)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

# the keys of the doctor's JSON, in the order users have read them, one list per kind of diagnosis
# ("data": feedlab's pipeline on a data set, feedlab.doctor.diagnosis; "user": your DataLoader, doctor.user)
REPORT_KEYS: dict[str, tuple[str, ...]] = {
    "data": ("data", "format", "device", "cuda", "cores", "effective_cores", "capacity", "speed_one", "model",
             "batch_size", "config", "stages", "end_to_end", "calibration", "predicted_samples_per_s",
             "measured_samples_per_s", "verdict", "bound_stage", "binding_term", "advice", "kind", "num_workers",
             "headroom", "refuted", "shm", "notes", "repeats", "warmup"),
    "user": ("kind", "batch_size", "num_workers", "device", "cuda", "cores", "effective_cores", "stages",
             "end_to_end", "measured_samples_per_s", "predicted_samples_per_s", "bound_stage", "verdict",
             "binding_term", "advice", "repeats", "batches", "notes", "config", "headroom"),
}
# the head keys every kind reports (typed fields of Report), and the prediction's (Report.prediction)
COMMON_KEYS = ("kind", "device", "cuda", "cores", "effective_cores", "batch_size", "num_workers", "config", "stages",
               "end_to_end", "measured_samples_per_s", "advice", "notes", "repeats", "headroom")
PREDICTION_KEYS = ("predicted_samples_per_s", "verdict", "bound_stage", "binding_term")
# the fields set after the build, in the JSON after the head (in the order they were set), absent until set:
# the doctor's own loop (verdict.one_verdict), resize ahead (diagnosis), the measured advice (advice.apply),
# your loader's batches, the ranks' advice, the step-side trials, the other load (user), the script phase and how
# the step was priced (--script --diagnose), the trace (--trace), the what-if (--what-if)
LATER_KEYS = ("batches_seen", "predicted_verdict", "loop", "verdict_note", "resize_ahead", "tried", "advice_start",
              "ranks_advice", "step_changes", "load", "script", "step_priced", "trace", "what_if")


@dataclass
class Report:
    """One diagnosis: what every kind reports, typed; what only its kind reports in ``extra`` (its head keys
    beyond :data:`COMMON_KEYS`: ``calibration``, ``shm`` …, read typed through the properties below). The one
    builder of the doctor's JSON is :meth:`as_dict` (its head in :data:`REPORT_KEYS` order, then the later
    fields in the order they were set, so what users read stays byte for byte as it was). ``prediction`` is
    ``predict``'s answer at the setting diagnosed (its rate, verdict, bound stage and binding term), None where
    nothing could be predicted."""

    kind: str
    device: str
    cuda: bool
    cores: int
    effective_cores: float
    batch_size: int | None
    num_workers: int
    config: dict
    stages: list[dict]
    end_to_end: list[dict]
    prediction: dict | None
    measured_samples_per_s: float | None
    advice: list[dict]
    notes: list[str]
    repeats: int
    headroom: float | None
    extra: dict = field(default_factory=dict)
    # later fields (LATER_KEYS): None until set
    batches_seen: list | None = None
    predicted_verdict: str | None = None
    loop: dict | None = None
    verdict_note: str | None = None
    resize_ahead: dict | None = None
    tried: list[dict] | None = None
    advice_start: dict | None = None
    ranks_advice: dict | None = None
    step_changes: list[dict] | None = None
    load: dict | None = None
    script: dict | None = None
    step_priced: str | None = None
    trace: str | None = None
    what_if: dict | None = None
    # keys read back that no field names (kept, in order, after the later fields: nothing read is lost)
    rest: dict = field(default_factory=dict)
    # the keys after the head when read back (later fields, then or among them the rest), in their order (a
    # later key set to None is still present)
    tail_order: list[str] = field(default_factory=list, repr=False, compare=False)

    # ---------------------------------------------------------------- the prediction, typed
    @property
    def predicted_samples_per_s(self) -> float | None:
        return (self.prediction or {}).get("predicted_samples_per_s")

    @property
    def verdict(self) -> str | None:
        return (self.prediction or {}).get("verdict")

    @verdict.setter
    def verdict(self, value: str | None) -> None:   # the run's one verdict (verdict.one_verdict sets the loop's)
        self.prediction = dict(self.prediction or {}, verdict=value)

    @property
    def bound_stage(self) -> str | None:
        return (self.prediction or {}).get("bound_stage")

    @property
    def binding_term(self) -> str | None:
        return (self.prediction or {}).get("binding_term")

    # ---------------------------------------------------------------- a data report's own head keys
    @property
    def data(self) -> str | None:
        return self.extra.get("data")

    @property
    def model(self) -> str | None:
        return self.extra.get("model")

    @property
    def speed_one(self) -> float | None:
        return self.extra.get("speed_one")

    @property
    def warmup(self) -> int | None:
        return self.extra.get("warmup")

    @property
    def calibration(self) -> dict | None:
        return self.extra.get("calibration")

    @property
    def refuted(self) -> list[dict]:
        return self.extra.get("refuted") or []

    @property
    def shm(self) -> dict | None:
        return self.extra.get("shm")

    def __setattr__(self, name: str, value) -> None:
        """A later field set on a built report takes its place at the end of the JSON, as a dict's new key
        would (set again: it keeps its place); a name that is no field is refused (add the field first)."""
        if name not in _SETTABLE:
            raise AttributeError(f"Report has no field {name!r}: add it to feedlab.doctor.report_fields.Report "
                                 "(and LATER_KEYS, or REPORT_KEYS for the head) first")
        order = self.__dict__.get("tail_order")
        if order is not None and name in LATER_KEYS and name not in order:
            order.append(name)
        object.__setattr__(self, name, value)

    def has(self, key: str) -> bool:
        """Whether a later field (:data:`LATER_KEYS`) was set, even to None."""
        return key in self.tail_order or getattr(self, key, None) is not None

    # ---------------------------------------------------------------- to and from the JSON dict
    @classmethod
    def of(cls, rep: "Report | dict") -> "Report":
        """The report typed: a Report as it is, a report's dict read by :meth:`from_dict`."""
        return rep if isinstance(rep, cls) else cls.from_dict(rep)

    @classmethod
    def from_dict(cls, d: dict) -> "Report":
        """A report's dict read back (``--json``, a saved report, a report being built): every key lands in
        its field (the prediction's in ``prediction``, a kind's own head keys in ``extra``, a key no field
        names in ``rest``), so :meth:`as_dict` gives ``d`` back key for key, in its order. A key a hand-made
        dict lacks reads as None (an empty list for ``stages``, ``end_to_end``, ``advice``, ``notes``)."""
        head = REPORT_KEYS.get(d.get("kind")) or tuple(dict.fromkeys(k for v in REPORT_KEYS.values() for k in v))
        pred = {k: d[k] for k in PREDICTION_KEYS if k in d}
        extra = {k: d[k] for k in head if k in d and k not in COMMON_KEYS and k not in PREDICTION_KEYS}
        later = {k: d[k] for k in d if k in LATER_KEYS}
        rest = {k: v for k, v in d.items() if k not in head and k not in COMMON_KEYS and k not in PREDICTION_KEYS
                and k not in LATER_KEYS}
        lists = ("stages", "end_to_end", "advice", "notes")
        common = {k: (d.get(k) if d.get(k) is not None or k not in lists else []) for k in COMMON_KEYS}
        return cls(**common, prediction=pred or None, extra=extra, **later, rest=rest,
                   tail_order=[k for k in d if k in later or k in rest])

    def as_dict(self) -> dict:
        """The report's JSON dict: the head in :data:`REPORT_KEYS` order (a key out of place refused in one
        line), then each later field set, then the keys no field names."""
        p = self.prediction or {}
        out = {k: getattr(self, k) for k in COMMON_KEYS}
        out.update({k: p.get(k) for k in PREDICTION_KEYS})
        out.update(self.extra)
        order = REPORT_KEYS[self.kind]
        if set(out) != set(order):
            raise ValueError(f"a {self.kind!r} report has keys {sorted(set(out) ^ set(order))} it should not, "
                             "or lacks them: see REPORT_KEYS")
        head = {k: out[k] for k in order}
        tail = [k for k in self.tail_order if k in LATER_KEYS or k in self.rest]
        tail += [k for k in LATER_KEYS if k not in tail and getattr(self, k) is not None]
        tail += [k for k in self.rest if k not in tail]
        head.update({k: getattr(self, k) if k in LATER_KEYS else self.rest[k] for k in tail})
        return head


_SETTABLE = frozenset({f.name for f in fields(Report)} | {"verdict"})


def put(rep: Report | dict, key: str, value) -> None:
    """Set one key of a report, typed or its dict (the writers :func:`verdict.one_verdict` and
    :func:`advice.apply` take both: ``--script`` sets the loop's verdict on the JSON it already holds)."""
    if isinstance(rep, Report):
        setattr(rep, key, value)
    else:
        rep[key] = value


def field_names() -> tuple[str, ...]:
    """Every field of :class:`Report` that holds a key of the JSON (not the bookkeeping)."""
    return tuple(f.name for f in fields(Report) if f.name not in ("extra", "rest", "tail_order", "prediction"))
