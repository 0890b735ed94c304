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


def test_doctor_block_quotes_the_executed_notebook_without_machine_paths(tmp_path, monkeypatch):
    import nbformat

    from feedlab import readme

    monkeypatch.setattr(readme, "REPO_ROOT", tmp_path)
    folder = tmp_path / "figures" / "10_doctor" / "h100-16c"
    folder.mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print(render(report))")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout",
                                           text="feedlab doctor · /root/repo/data/sr64 · png/pil\nverdict: data-bound\n")]
    nb.cells = [nbformat.v4.new_code_cell("x = 1"), cell]
    nbformat.write(nb, folder / "10_doctor.executed.ipynb")
    (folder / "fingerprint.json").write_text('{"cpu_usable": 16, "gpus": [{"name": "NVIDIA H100"}]}')
    block = readme.doctor_block(tmp_path / "figures")
    assert "**h100-16c**" in block and "verdict: data-bound" in block
    assert "· data/sr64 ·" in block and "/root/" not in block
    text = "a\n<!-- doctor:start -->\nold\n<!-- doctor:end -->\nb"
    assert readme._replace_between(text, readme.DOCTOR_START, readme.DOCTOR_END, "new") == \
        "a\n<!-- doctor:start -->\nnew\n<!-- doctor:end -->\nb"
