"""The tuner: ``feedlab.tune(make_loader, step=None, budget_s=...)`` picks, applies and proves the loader
settings of an unmodified PyTorch DataLoader (``feedlab-doctor --tune``; docs/TUNE.md).

Modules: ``tuner.probe`` (the stage probe and the doctor's prediction per setting), ``tuner.candidates``
(what may change, where it applies, the limits, the rebuild and the line to paste), ``tuner.threads``
(:class:`ThreadedLoader`), ``tuner.search`` (:func:`tune`, :class:`Tuned`), ``tuner.race`` (its measured
passes raced: a candidate already out of the running ends its window early), ``tuner.epochs`` (the
between-epochs re-tuner, :class:`Retuned`), ``tuner.__main__`` (the command line)."""

from .epochs import Retuned
from .search import TOO_BUSY, Tuned, tune
from .threads import ThreadedLoader

__all__ = ["tune", "Tuned", "TOO_BUSY", "ThreadedLoader", "Retuned"]
