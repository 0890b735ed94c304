"""Adding a storage format is its store plus one registration: everything that iterates
formats (the pipeline, the doctor, the loader builder) then works with it, unnamed."""

import io
import json
from contextlib import redirect_stdout

import numpy as np
import pytest
import rawbin_store

from feedlab import formats
from feedlab import pipeline as P
from feedlab.doctor import Doctor, Effort, diagnose


@pytest.fixture()
def rawbin(sr_root, sr_reference, tmp_path):
    import shutil

    root = tmp_path / "sr"
    shutil.copytree(sr_root, root)
    formats.register(formats.FormatSpec("rawbin", "sr", rawbin_store.RawBinDataset, rawbin_store.write,
                                        rawbin_store.bytes_on_disk, "rawbin/", "raw bytes, one file per sample",
                                        raw_split=True, default_decode="frombuffer"))
    try:
        formats.write("rawbin", root, sr_reference)
        yield root
    finally:
        formats.unregister("rawbin")


def test_registered_format_reads_back_and_loads(rawbin, sr_reference):
    assert "rawbin" in formats.present(rawbin) and "rawbin" in formats.sr_formats()
    ds = formats.open_dataset(rawbin, "rawbin")
    for i in (0, len(ds) - 1):
        assert all(np.array_equal(a, b) for a, b in zip(ds[i], sr_reference[i]))
    spec = P.PipelineSpec(format="rawbin", collate="fast", batch_size=8)
    assert spec.decode_backend == "frombuffer" and not spec.problems("cpu")
    lr, hr = next(iter(P.make_loader(P.open_dataset(rawbin, spec), spec)))
    assert tuple(lr.shape) == (8, 3, *ds.lr_shape[:2]) and hr.dtype.is_floating_point is False


def test_doctor_measures_and_advises_a_new_format(rawbin):
    spec = P.PipelineSpec(format="rawbin", collate="totensor", batch_size=8, device="cpu")
    doc = Doctor(rawbin, spec, max_workers=0, effort=Effort(repeats=1, samples=8, e2e_batches=2, cold=True),
                 alt_formats=["png", "rawbin"]).measure()
    assert doc.table.get(("read", "rawbin", "frombuffer")).bytes_per_sample > 0
    assert doc.table.get(("read_cold", "rawbin", "frombuffer")) is not None or \
        "eviction" in doc.table.stages[("read_cold", "rawbin", "frombuffer")].note
    rep = diagnose(doc, spec)
    assert rep["end_to_end"][0]["samples_per_s"] > 0
    # png was measured as an alternative: the advice may name it, priced from the table
    assert any(k[:2] == ("read", "png") for k in doc.table.stages)


def test_cli_offers_a_registered_format(rawbin):
    from feedlab.doctor.__main__ import main

    buf = io.StringIO()
    with redirect_stdout(buf):
        main(["--data", str(rawbin), "--format", "rawbin", "--max-workers", "0", "--batch-size", "8", "--json",
              "--repeats", "1", "--samples", "8", "--batches", "2", "--no-cold"])
    assert json.loads(buf.getvalue())["format"] == "rawbin"


def test_notebook_05_times_a_registered_format(rawbin):
    """05's grid is built from the registries: a new format appears with every loader kind its
    capabilities allow, and its rows are timed like any other, with no table to extend."""
    from feedlab.experiments import storage_formats as S

    assert "rawbin" in formats.present(rawbin)
    got = {(s.loader, s.num_workers) for s in S.settings(formats.present(rawbin), [2], 8) if s.format == "rawbin"}
    assert {("plain", 0), ("dataloader", 0), ("dataloader", 2)} <= got
    assert not any(k in ("batched", "chunk") for k, _w in got)  # neither batched nor chunked: no such rows
    res = S.run(rawbin, ["rawbin"], worker_counts=[1], batch_size=8, repeats=1, warmup=0, samples=16,
                loaders=["plain", "dataloader"], log=None)
    df = res.frame()
    read = df[(df["format"] == "rawbin") & (df.metric == "samples_per_s")]
    assert set(zip(read["loader"], read["num_workers"])) == {("plain", 0), ("dataloader", 0), ("dataloader", 1)}
    assert (read.value > 0).all()
    assert S.disk_table(rawbin, ["rawbin"]).bytes.iloc[0] > 0
