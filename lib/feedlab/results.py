"""Tidy result tables: one row per measurement, the fingerprint beside them.

Columns: ``experiment, variant, <parameters...>, repeat, metric, value, unit``.
Parameters are named as in ``torch.utils.data.DataLoader`` where one exists
(``batch_size``, ``num_workers``, ``pin_memory``) and otherwise ``input_size``,
``format``, ``collate``, ``backend`` ...
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any, Iterable

from feedlab import paths
from feedlab.files import kind_of
from feedlab.fingerprint import machine_fingerprint

BASE_COLUMNS = ("experiment", "variant")
TAIL_COLUMNS = ("repeat", "metric", "value", "unit")


def atomic_write(path: Path, data: str | bytes, *, tmp: Path | None = None) -> None:
    """Write ``data`` (text, always as UTF-8, or bytes) beside ``path`` under a unique temporary name, then
    rename it over ``path``: a reader sees the old file or the whole new one, and an interrupted write leaves
    nothing. The one permission rule: the usual permissions (0666 less the umask; ``mkstemp`` would make it
    0600). ``tmp`` names the temporary (``formats._io.tmp_sibling``'s registered one, which its sweep may
    remove after a killed writer); by default ``<name>.tmp-<pid>-<6 hex>``.

    The one atomic write of data held in memory; output a library writes to a path itself (a store, a
    tar, ``np.save``) goes through ``formats._io.atomic_output``, which keeps the same temporaries."""
    path = Path(path)
    try:
        mode = os.lstat(path).st_mode
    except OSError:   # not there (or not reachable): the write below says what is wrong
        mode = None
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):   # never renamed over /dev/full
        raise OSError(f"{path} is {kind_of(mode)}, not a regular file: left as it is, nothing written; "
                      "give the path of a file to write")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tmp) if tmp is not None else path.with_name(f"{path.name}.tmp-{os.getpid()}-{os.urandom(3).hex()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data if isinstance(data, bytes) else data.encode("utf-8"))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class Results:
    """Collects measurements as rows; writes CSV + fingerprint.json.

    >>> r = Results()
    >>> r.add("worker_scaling", "png", "samples_per_s", 812.0, "samples/s",
    ...       repeat=0, batch_size=64, num_workers=2)
    """

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.left_out: list[tuple[str, str]] = []   # (setting, why) a grid left out (a budget, a turned ladder)
        self.columns: tuple[str, ...] = ()   # the parameter columns its rows carry: an empty frame has them too

    def add(self, experiment: str, variant: str, metric: str, value: float, unit: str,
            repeat: int = 0, **params: Any) -> None:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            raise ValueError(f"{experiment}/{variant}/{metric}: refusing to record a missing value")
        row = {"experiment": experiment, "variant": variant, **params,
               "repeat": int(repeat), "metric": metric, "value": float(value), "unit": unit}
        self.rows.append(row)

    def add_samples(self, experiment: str, variant: str, metric: str,
                    values: Iterable[float], unit: str, **params: Any) -> None:
        """One row per repeat."""
        for i, v in enumerate(values):
            self.add(experiment, variant, metric, v, unit, repeat=i, **params)

    def extend(self, other: "Results") -> None:
        self.rows.extend(other.rows)
        self.left_out.extend(getattr(other, "left_out", []))
        self.columns = tuple(dict.fromkeys([*self.columns, *getattr(other, "columns", ())]))

    def __len__(self) -> int:
        return len(self.rows)

    def frame(self):
        import pandas as pd

        df = pd.DataFrame(self.rows)
        if df.empty:   # no rows (every setting left out): the columns a reader selects on are still there
            return pd.DataFrame(columns=[*BASE_COLUMNS, *self.columns, *TAIL_COLUMNS])
        params = [c for c in df.columns if c not in BASE_COLUMNS + TAIL_COLUMNS]
        return df[list(BASE_COLUMNS) + params + list(TAIL_COLUMNS)]

    def write(self, out_dir: str | os.PathLike, name: str = "results",
              fingerprint: dict | None = None) -> Path:
        """Write ``<name>.csv`` and ``fingerprint.json`` into ``out_dir``; returns the CSV path."""
        out = Path(out_dir)
        csv_path = out / f"{name}.csv"
        atomic_write(csv_path, self.frame().to_csv(index=False))
        atomic_write(out / "fingerprint.json",
                           json.dumps(fingerprint or machine_fingerprint(), indent=2, default=str))
        return csv_path


def summarize(df, by: list[str] | tuple[str, ...], value: str = "value"):
    """Median and spread per group: median, q25, q75, min, max, n (over repeats). No rows: the same
    columns, no rows (a grid whose every setting was left out)."""
    import pandas as pd

    if df.empty:
        return pd.DataFrame(columns=[*by, "median", "q25", "q75", "min", "max", "n"])
    g = df.groupby(list(by), dropna=False, sort=False)[value]
    out = g.agg(median="median", q25=lambda s: s.quantile(0.25),
                q75=lambda s: s.quantile(0.75), min="min", max="max", n="count")
    out = out.reset_index()
    # shown above the table in a notebook (feedlab.findings.notebook_display)
    out.attrs["caption"] = (f"Per {', '.join(by)}: the median over n repeats, its interquartile range "
                            f"(q25–q75), min and max")
    return out


def summary_median(summary, column: str = "median", **where) -> float:
    """The one value of ``column`` in the row of a :func:`summarize` table where every
    ``key == value`` of ``where`` holds (the notebooks' readings: ``summary_median(s,
    num_workers=2, batch_size=8)``). No such row: ``KeyError`` naming the selection."""
    s = summary
    for k, v in where.items():
        s = s[s[k] == v]
    if s.empty:
        raise KeyError(f"no row with {', '.join(f'{k}={v!r}' for k, v in where.items())} in the summary")
    return float(s[column].iloc[0])


def median(values: Iterable[float]) -> float:
    """The median (mean of the two middle values for an even count); the one median
    every reading uses, instead of ``sorted(x)[n // 2]`` (the upper middle)."""
    return median_iqr(values)[0]


def median_iqr(values: Iterable[float]) -> tuple[float, float, float]:
    """(median, q25, q75) of a list of numbers."""
    import numpy as np

    a = np.asarray(list(values), dtype=float)
    if a.size == 0:
        raise ValueError("median_iqr of no values")
    q25, med, q75 = np.percentile(a, [25, 50, 75])
    return float(med), float(q25), float(q75)


def fmt_spread(values: Iterable[float], unit: str = "", digits: int = 3) -> str:
    """'12.3 (11.9–12.8) unit' : median with the interquartile range."""
    med, lo, hi = median_iqr(values)

    def f(x: float) -> str:
        return f"{x:.{digits}g}"
    return f"{f(med)} ({f(lo)}–{f(hi)}){' ' + unit if unit else ''}"


def record_results(payload: dict, out_dir: str | os.PathLike | None = None) -> dict:
    """Publish a notebook's headline numbers.

    Displays the payload as JSON (so an executed notebook carries it) and, with
    ``out_dir``, writes ``results.json`` there for the tests and the runner.
    """
    text = json.dumps(payload, indent=2, default=_json_default, sort_keys=True)
    # a committed record names files relative to the repository, not this machine's checkout

    text = text.replace(str(paths.REPO_ROOT) + "/", "")
    if out_dir is not None:
        atomic_write(Path(out_dir) / "results.json", text)
    try:
        from IPython.display import JSON, display

        display(JSON(_finite(json.loads(text))), metadata={"feedlab": "results"})
    except Exception:
        print(text)
    return payload


def _finite(obj: Any) -> Any:
    """``obj`` with NaN and ±inf as None: the notebook's display channel takes strict JSON only
    (a NaN there gets a kernel warning in place of the numbers; ``results.json`` keeps NaN)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def _json_default(obj: Any):
    try:
        import numpy as np

        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, np.ndarray):
            return obj.tolist()
    except Exception:
        pass
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
