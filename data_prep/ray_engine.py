"""``data_prep pack --engine ray``: the PNGs decoded in parallel by Ray Data tasks on a
local Ray (``ray.init(num_cpus=...)``), then written by the same writers as the default
engine. Ray is optional (``pip install -e '.[ray]'``); without it the command says so."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import numpy as np

from feedlab import paths

from .errors import DataPrepError


def _decode(batch: dict, root: str) -> dict:
    from feedlab.formats import PngDataset

    ds = PngDataset(Path(root))
    pairs = [ds._read(int(i)) for i in batch["id"]]
    return {"id": np.asarray(batch["id"]), "lr": np.stack([p[0] for p in pairs]),
            "hr": np.stack([p[1] for p in pairs])}


def available() -> tuple[bool, str]:
    """``(True, "")`` when Ray Data imports, else ``(False, reason and the install line)``
    (re-exported by :mod:`feedlab.scale.remote_decode`)."""
    try:
        # the first import, here: in a notebook without ipywidgets, Ray Data's import warns that tqdm has no
        # widgets and Ray logs an INFO line asking for them (twice); neither is about the measurement
        logging.getLogger("ray.widgets.util").setLevel(logging.WARNING)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="IProgress not found")
            import ray  # noqa: F401
            import ray.data  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure is "unavailable", with its reason
        return False, f"unavailable: {type(exc).__name__}: {exc} (pip install -e '.[ray]')"
    return True, ""


def decode_all(root, n: int, lr_shape, hr_shape, num_cpus: int | None = None, batch: int = 256):
    """``(lr, hr)`` uint8 arrays of all ``n`` samples, decoded by Ray tasks; each sample
    is checked to arrive exactly once."""
    ok, why = available()
    if not ok:
        raise DataPrepError(f"--engine ray: {why}; or leave --engine out (the default decodes here)")
    import ray
    import ray.data

    started = not ray.is_initialized()
    if started:
        short = paths.ray_temp_dir()   # a long $TMPDIR: Ray's sockets there would pass AF_UNIX's 107 bytes
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, configure_logging=False,
                 **({"_temp_dir": short} if short else {}))
        ray.data.DataContext.get_current().enable_progress_bars = False
    lr = np.empty((n, *lr_shape), np.uint8)
    hr = np.empty((n, *hr_shape), np.uint8)
    seen = np.zeros(n, np.int64)
    try:
        ds = ray.data.range(n).map_batches(_decode, fn_kwargs={"root": str(root)}, batch_size=batch,
                                           batch_format="numpy", num_cpus=1)
        for b in ds.iter_batches(batch_size=None, batch_format="numpy"):
            ids = b["id"]
            if b["lr"].shape[1:] != lr.shape[1:] or b["hr"].shape[1:] != hr.shape[1:]:
                raise DataPrepError(f"png: samples {int(ids[0])}..{int(ids[-1])} have shapes {b['lr'].shape[1:]}, "
                                    f"{b['hr'].shape[1:]}, manifest says {lr_shape}, {hr_shape}")
            lr[ids], hr[ids] = b["lr"], b["hr"]
            np.add.at(seen, ids, 1)
    except DataPrepError:
        raise
    except Exception as exc:  # noqa: BLE001 - a Ray task's failure, in one line
        first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise DataPrepError(f"--engine ray: decoding the PNGs under {root} failed: {first}; "
                            "`python -m data_prep verify` or rebuild with `python -m data_prep sr`") from None
    finally:
        if started:
            ray.shutdown()
    if not (seen == 1).all():
        raise DataPrepError(f"--engine ray: {(seen == 0).sum()} samples missing, {(seen > 1).sum()} repeated")
    return lr, hr
