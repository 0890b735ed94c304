"""feedlab.readme: the figures section's machines and time span, and the README it rewrites."""

from __future__ import annotations

import json

from feedlab import readme


def _run(figures, nb, key, started, ended):
    d = figures / nb / key
    d.mkdir(parents=True)
    fp = {"cpu_model": "Test CPU", "cpu_usable": 2, "memory_bytes": 2 ** 30, "gpus": [], "python": "3.11",
          "torch": "2", "git": {"commit": "abcdef123456", "dirty": False},
          "time_utc": ended, "started_utc": started}
    (d / "fingerprint.json").write_text(json.dumps(fp))
    (d / "results.json").write_text(json.dumps({"reading": [f"{nb} read"]}))


def test_span_starts_at_the_run_start_not_at_the_first_write(tmp_path, monkeypatch):
    monkeypatch.setattr(readme, "REPO_ROOT", tmp_path)
    _run(tmp_path, "01_a", "cpu-2c", "2026-01-01T10:00:00+00:00", "2026-01-01T10:20:00+00:00")
    _run(tmp_path, "02_b", "cpu-2c", "2026-01-01T10:20:30+00:00", "2026-01-01T10:45:00+00:00")
    text = readme.section(tmp_path)
    assert "2026-01-01T10:00Z – 2026-01-01T10:45Z" in text
    assert "- 01_a read" in text and "- 02_b read" in text


def test_update_readme_rewrites_between_markers_only(tmp_path, monkeypatch):
    monkeypatch.setattr(readme, "section", lambda *a, **k: "NEW SECTION")
    path = tmp_path / "README.md"
    path.write_text(f"intro\n{readme.START}\nold\n{readme.END}\noutro\n")
    assert readme.update_readme(path) is True
    assert path.read_text() == f"intro\n{readme.START}\nNEW SECTION\n{readme.END}\noutro\n"
    assert readme.update_readme(path) is False  # a second run changes nothing
