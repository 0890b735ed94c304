"""feedlab: measure where a PyTorch input pipeline spends its time.

Modules (one concern each, all named in docs/ARCHITECTURE.md): paths, fingerprint,
machines, results, timing, plots, profiles, formats, decode, collate, models, loaders,
pipeline (the one vocabulary of an input pipeline), nbhelpers, bench, run, doctor.
"""

__version__ = "0.1.0"
