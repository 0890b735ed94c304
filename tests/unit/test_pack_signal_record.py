"""data_prep.pack: a signal landing after a format was put in place but before the manifest recorded it (CI's
loaded run of test_nothing_lost's pack case: sr.h5 whole on disk, the manifest naming only lmdb) — the format is
recorded, then the signal stops the pack."""

from __future__ import annotations

import importlib
import json
import signal

import pytest

import data_prep
from feedlab import formats as F
from feedlab import procgroup

P = importlib.import_module("data_prep.pack")   # the module (data_prep.pack the name is its function)


def test_a_signal_just_after_a_format_is_in_place_leaves_it_recorded(tmp_path, monkeypatch):
    root = tmp_path / "sr"
    data_prep.build_sr(root, 16, 2, 24, seed=0, log=lambda _m: None)
    real_write = F.write

    def write_then_signalled(fmt, root_, samples, **opts):
        real_write(fmt, root_, samples, **opts)                  # in place, whole
        raise procgroup.Signalled(signal.SIGTERM)                # ... and the signal lands before the record

    monkeypatch.setattr(F, "write", write_then_signalled)
    with pytest.raises(procgroup.Signalled):
        P.pack(root, "npy", log=lambda _m: None)
    formats = json.loads((root / "manifest.json").read_text()).get("formats", {})
    assert "npy" in formats and formats["npy"]["bytes"] > 0, formats
    assert not [p.name for p in root.iterdir() if ".tmp-" in p.name]


def test_a_signal_before_a_format_is_in_place_records_nothing(tmp_path, monkeypatch):
    root = tmp_path / "sr"
    data_prep.build_sr(root, 16, 2, 24, seed=0, log=lambda _m: None)

    def signalled(fmt, root_, samples, **opts):
        raise procgroup.Signalled(signal.SIGTERM)

    monkeypatch.setattr(F, "write", signalled)
    with pytest.raises(procgroup.Signalled):
        P.pack(root, "npy", log=lambda _m: None)
    assert "npy" not in json.loads((root / "manifest.json").read_text()).get("formats", {})
