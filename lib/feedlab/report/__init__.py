"""The reporting wing: what the committed results say — the claims ledger and the targets,
the README's figure section, the machine comparisons, the GPU readings, the summary.

Nothing is imported here: each module is imported by its own name."""
