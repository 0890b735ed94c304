"""feedlab: measure where a PyTorch input pipeline spends its time.

Modules (one concern each, all named in docs/ARCHITECTURE.md): paths, fingerprint,
machines, results, timing, plots, profiles, formats, decode, collate, models, loaders,
pipeline (the one vocabulary of an input pipeline), nbhelpers, bench, run, doctor.
"""

__version__ = "0.1.0"

import sys as _sys

if _sys.argv[:1] == ["-m"] or _sys.argv[:1] and _sys.argv[0].rsplit("/", 1)[-1].startswith("feedlab-"):
    # `python -m feedlab.X` (or data_prep) locating its module, or a console script of ours: a signal from now is
    # one line (feedlab.startup)
    from feedlab import startup as _startup

    _startup.install()


def __getattr__(name: str):
    """``feedlab.tune``: the tuner's entry point, imported when first asked for (this package is the
    standard-library floor: importing it brings nothing else)."""
    if name == "tune":
        from feedlab.tuner import tune

        return tune
    raise AttributeError(f"module 'feedlab' has no attribute {name!r}")
