"""What every contender of notebook 13 shares: the spec, the source samples, the batch form.

A contender (see :mod:`feedlab.peers`) gets a :class:`Spec` and the same
:class:`Source` (the SR patch pairs as uint8 arrays, or the JPEG files of the
classification set) and yields batches in one of two forms:

* SR: ``(lr, hr)``, uint8 images, NHWC or NCHW (numpy or torch);
* classification: ``(images, labels, ids)``, images uint8 NHWC or NCHW of
  ``size × size`` (float in [0, 1] for the stock ToTensor path), ``ids`` the
  source index of each sample, so a check can count identities.

With ``augment=False`` a classification pipeline replaces its random-resized
crop and flip by a plain resize to ``size × size``: the checker compares that
output with a reference decode (:mod:`feedlab.peers.check`).
"""

from __future__ import annotations

import functools
import json
import os
import time
from dataclasses import asdict, dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from feedlab.cache import files_under
from feedlab.results import atomic_write

from ._process import check_imports, in_venv
from .venvs import VENVS, python_for, why_missing

KINDS = ("sr", "cls")
# the ImageNet recipe (torchvision RandomResizedCrop defaults)
RRC_SCALE = (0.08, 1.0)
RRC_RATIO = (3 / 4, 4 / 3)


@dataclass(frozen=True)
class Spec:
    kind: str                 # "sr" or "cls"
    batch_size: int = 64
    workers: int = 0          # each contender maps this onto its own knob (see Peer.parallelism)
    size: int = 64            # classification output side
    augment: bool = True      # cls: random-resized crop + flip; False: resize (for the check)
    shuffle: bool = True
    seed: int = 0

    def with_(self, **kw) -> "Spec":
        return replace(self, **kw)

    def as_dict(self) -> dict:
        return asdict(self)


class Source:
    """The samples every contender converts and must return.

    SR: ``lr``/``hr`` uint8 arrays ``(n, h, w, 3)`` read from the set's packed
    ``npy_mmap`` (which ``data_prep verify`` checks against the PNGs), and the
    PNG files the stock baseline decodes. Classification: the JPEG ``paths``,
    ``labels`` and class names; ``n`` of them, spread evenly over the classes.
    """

    def __init__(self, kind: str, root, limit: int | None = None):
        if kind not in KINDS:
            raise ValueError(f"kind={kind!r}: one of {', '.join(KINDS)}")
        self.kind = kind
        self.root = Path(root)
        if kind == "sr":
            d = self.root / "npy_mmap"
            if not (d / "lr.npy").is_file():
                raise FileNotFoundError(f"{d}/lr.npy missing: `python -m data_prep pack {self.root} --to npy_mmap`")
            lr = np.load(d / "lr.npy", mmap_mode="r")
            hr = np.load(d / "hr.npy", mmap_mode="r")
            n = len(lr) if limit is None else min(int(limit), len(lr))
            self.lr = np.ascontiguousarray(lr[:n])
            self.hr = np.ascontiguousarray(hr[:n])
            self.n = n
        else:
            from feedlab.formats.imagefolder import scan

            self.classes, samples = scan(self.root)
            if limit is not None and limit < len(samples):
                step = len(samples) / int(limit)
                samples = [samples[int(i * step)] for i in range(int(limit))]
            self.paths = [p for p, _l in samples]
            self.labels = np.array([lab for _p, lab in samples], np.int64)
            self.n = len(samples)
        self.limit = limit

    def key(self) -> str:
        """Names the converted copies: the source folder, kind and count."""
        return f"{self.kind}-{self.root.name}-n{self.n}"

    def jpeg_bytes(self, i: int) -> bytes:
        with open(self.paths[i], "rb") as fh:
            return fh.read()

    def source_bytes(self) -> int:
        if self.kind == "sr":
            return int(self.lr.nbytes + self.hr.nbytes)
        return int(sum(os.stat(p).st_size for p in self.paths))


@dataclass
class Conversion:
    """What a contender's writer cost: wall seconds and bytes on disk (0, 0 when it reads the source)."""
    seconds: float
    bytes: int
    path: str = ""
    note: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Peer:
    """One contender. ``check()`` -> (available, reason); ``convert(source, work)`` -> Conversion;
    ``loader(source, work, spec)`` -> iterable of batches (re-iterable: one ``iter`` per epoch)."""
    name: str
    label: str
    module: str                    # the peers module that implements it
    import_names: tuple[str, ...]  # what must import
    install: str                   # how its docs say to install it
    kinds: tuple[str, ...] = KINDS
    parallelism: str = ""          # what "workers" means for it
    shuffle: str = ""              # how it shuffles (stated in the table)
    recipe: str = ""               # what its documentation recommends, as used here
    min_workers: int = 0           # the fewest workers it runs (threads that start at one): 0 asked runs this
    extra_check: Callable[[], str] | None = field(default=None, repr=False)

    def _impl(self):
        import importlib

        return importlib.import_module(f"feedlab.peers.{self.module}")

    def check(self) -> tuple[bool, str]:
        """Importable here, or (a peer with a venv of its own, :mod:`feedlab.peers.venvs`) its venv built."""
        if self.name in VENVS and not in_venv():
            python = python_for(self.name)
            if python is not None:
                why = check_imports(python, self.import_names)
                return (not why, f"{why}; install: {self.install}" if why else "")
            ok, _why = self.check_here()
            return (True, "") if ok else (False, why_missing(self.name))
        return self.check_here()

    def check_here(self) -> tuple[bool, str]:
        """Importable in this interpreter (and its extra check passes)."""
        import importlib
        import warnings

        for name in self.import_names:
            try:
                with warnings.catch_warnings():   # tqdm.auto, imported by datasets and litdata, warns in a kernel
                    warnings.filterwarnings("ignore", message="IProgress not found")   # without ipywidgets
                    importlib.import_module(name)
            except Exception as exc:  # an install can be present and still fail to import
                return False, f"import {name}: {type(exc).__name__}: {_last_line(exc)}; install: {self.install}"
        if self.extra_check is not None:
            why = self.extra_check()
            if why:
                return False, why
        return True, ""

    def convert(self, source: Source, work: Path) -> Conversion:
        return self._impl().convert(source, Path(work))

    def loader(self, source: Source, work: Path, spec: Spec) -> Iterable:
        return self._impl().loader(source, Path(work), spec)

    def data_files(self, source: Source, work: Path) -> list[Path]:
        """The files a loader reads (what a cold-cache epoch evicts)."""
        fn = getattr(self._impl(), "data_files", None)
        if fn is not None:
            return list(fn(source, Path(work)))

        return files_under(work) if Path(work).exists() else []


CORE_DISTS = ("torch", "torchvision", "numpy", "pillow")


@functools.lru_cache(maxsize=1)
def _owners() -> dict[str, list[str]]:
    """Which distributions provide each top-level module (read once: it walks every installed file list)."""
    return metadata.packages_distributions()


def installed_versions(modules: Iterable[str] = (), everything: bool = False) -> dict[str, str]:
    """The distributions this interpreter has, ``{name: version}`` sorted by name: every one (``everything``:
    a peer's own venv, its whole freeze, so a changed rate can be traced to a changed package) or those that
    provide ``modules`` (a peer's imports, ``"spdl.io"`` as ``spdl``) with :data:`CORE_DISTS`."""
    if everything:
        found = {}
        for d in metadata.distributions():   # on the path first is what imports: kept over a later copy
            if d.metadata["Name"]:
                found.setdefault(d.metadata["Name"], d.version)
    else:
        owners = _owners()
        names = set(CORE_DISTS)
        for m in modules:   # a namespace (``nvidia.dali``): the distributions named for the module under it
            parts, found_for = m.split("."), owners.get(m.split(".")[0], [])
            if len(found_for) > 1 and len(parts) > 1:
                found_for = [n for n in found_for if parts[1].lower() in n.lower()] or found_for
            names |= set(found_for)
        found = {}
        for n in names:
            try:
                found.setdefault(metadata.metadata(n)["Name"], metadata.version(n))   # the one imported: the first
            except metadata.PackageNotFoundError:
                continue
    return dict(sorted(found.items(), key=lambda kv: kv[0].lower()))


def _last_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1] if text else type(exc).__name__


def timed_conversion(work: Path, write: Callable[[Path], None], note: str = "") -> Conversion:
    """Run ``write(tmp)`` into a fresh folder beside ``work``, rename it onto ``work`` when done
    (an interrupted conversion leaves nothing), and time it."""
    from feedlab.formats._common import atomic_output

    work = Path(work)
    t0 = time.perf_counter()
    with atomic_output(work, is_dir=True) as tmp:
        write(tmp)
    seconds = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in files_under(work))
    atomic_write(work.parent / f"{work.name}.conversion.json",
                 json.dumps({"seconds": seconds, "bytes": size, "note": note}))
    return Conversion(seconds, size, str(work), note)


def sr_shapes(source: Source) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return tuple(source.lr.shape[1:]), tuple(source.hr.shape[1:])


def rrc_box(h: int, w: int, rng: np.random.Generator, scale=RRC_SCALE, ratio=RRC_RATIO) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop.get_params on an ``h × w`` image: (top, left, height, width)."""
    area = h * w
    log_ratio = np.log(ratio)
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = float(np.exp(rng.uniform(*log_ratio)))
        cw = int(round(np.sqrt(target * aspect)))
        ch = int(round(np.sqrt(target / aspect)))
        if 0 < cw <= w and 0 < ch <= h:
            return int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1)), ch, cw
    in_ratio = w / h
    if in_ratio < min(ratio):
        cw, ch = w, int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        ch, cw = h, int(round(h * max(ratio)))
    else:
        cw, ch = w, h
    return (h - ch) // 2, (w - cw) // 2, ch, cw


def torchvision_cls_transform(size: int, augment: bool, to_tensor: bool = False):
    """The torchvision recipe on a PIL image: RandomResizedCrop + flip (or a resize), then
    ``ToTensor`` (float, the stock path) or ``PILToTensor`` (uint8)."""
    from torchvision import transforms as T

    head = ([T.RandomResizedCrop(size), T.RandomHorizontalFlip()] if augment
            else [T.Resize((size, size))])
    return T.Compose(head + [T.ToTensor() if to_tensor else T.PILToTensor()])
