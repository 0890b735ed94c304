"""feedlab: measure where a PyTorch input pipeline spends its time.

Modules (one concern each): paths, fingerprint, results, timing, plots,
profiles, formats, decode, collate, models, loaders, bench, run, doctor.
"""

__version__ = "0.1.0"
