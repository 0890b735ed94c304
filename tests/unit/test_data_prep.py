"""data_prep: bad inputs, conversions, determinism, atomic output, pack/verify, ensure_*."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import lmdb
import numpy as np
import pytest
from PIL import Image

import data_prep
from data_prep import DataPrepError, VerifyError
from data_prep.__main__ import main
from data_prep.images import load_rgb8, to_rgb8
from feedlab import formats as F

REPO = Path(__file__).resolve().parents[2]
QUIET = dict(log=lambda _m: None)


def _photo(path: Path, size=(80, 72), mode="RGB", seed=0) -> Path:
    rng = np.random.default_rng(seed)
    w, h = size
    if mode == "I;16":
        im = Image.fromarray(rng.integers(0, 65536, (h, w), dtype=np.uint16))
    else:
        im = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")
        if mode == "P":
            im = im.quantize(16)
        elif mode != "RGB":
            im = im.convert(mode)
    path.parent.mkdir(parents=True, exist_ok=True)
    im.save(path)
    return path


def _leftovers(parent: Path) -> list[str]:
    return [p.name for p in parent.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


@pytest.fixture
def src(tmp_path) -> Path:
    d = tmp_path / "src"
    for k in range(3):
        _photo(d / f"photo{k}.png", seed=k)
    return d


def _run_cli(*args, cwd=REPO):
    env = dict(os.environ, PYTHONPATH=f"{REPO / 'lib'}{os.pathsep}{REPO}")
    return subprocess.run([sys.executable, "-m", "data_prep", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


def test_corrupt_image_fails_naming_it_and_leaves_nothing(src, tmp_path):
    bad = src / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg")
    out = tmp_path / "out" / "sr"
    r = _run_cli("sr", "--out", str(out), "--source", str(src), "--patch", "32", "--count", "8")
    assert r.returncode != 0
    assert "broken.jpg" in r.stderr and "--skip-bad" in r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists()
    assert not (out.parent.exists() and _leftovers(out.parent))


def test_skip_bad_reports_count(src, tmp_path, capsys):
    (src / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    (src / "empty.jpg").write_bytes(b"")
    out = tmp_path / "sr"
    assert main(["sr", "--out", str(out), "--source", str(src), "--patch", "32", "--count", "8", "--skip-bad"]) == 0
    text = capsys.readouterr().out
    assert "skipped 2 unreadable image(s)" in text
    man = json.loads((out / "manifest.json").read_text())
    assert len(man["skipped"]["unreadable"]) == 2 and man["count"] == 8
    assert len(list((out / "hr").glob("*.png"))) == 8


def test_too_small_images_skipped_with_count(src, tmp_path, capsys):
    _photo(src / "tiny.png", size=(20, 100))
    _photo(src / "thin.png", size=(100, 31))
    out = tmp_path / "sr"
    assert main(["sr", "--out", str(out), "--source", str(src), "--patch", "32", "--count", "4"]) == 0
    assert "skipped 2 image(s) smaller than 32x32" in capsys.readouterr().out
    man = json.loads((out / "manifest.json").read_text())
    assert sorted(Path(p).name for p in man["skipped"]["too_small"]) == ["thin.png", "tiny.png"]


def test_all_too_small_is_an_error(tmp_path, capsys):
    d = tmp_path / "src"
    _photo(d / "a.png", size=(16, 16))
    assert main(["sr", "--out", str(tmp_path / "o"), "--source", str(d), "--patch", "32", "--count", "4"]) == 2
    assert "no usable source images" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("mode", ["L", "LA", "RGBA", "P", "I;16", "1", "CMYK"])
def test_sources_converted_to_rgb8(tmp_path, mode):
    ext = "jpg" if mode == "CMYK" else "png"
    p = _photo(tmp_path / f"x.{ext}", size=(40, 36), mode=mode)
    rgb, src_mode = load_rgb8(p)
    assert rgb.dtype == np.uint8 and rgb.shape == (36, 40, 3) and rgb.flags.c_contiguous
    if mode in ("L", "I;16", "1", "LA"):
        assert np.array_equal(rgb[..., 0], rgb[..., 1]) and np.array_equal(rgb[..., 1], rgb[..., 2])


def test_conversion_values():
    g16 = Image.fromarray(np.array([[0, 256, 65535]], dtype=np.uint16))
    assert to_rgb8(g16)[0, :, 0].tolist() == [0, 1, 255]
    rgba = Image.fromarray(np.array([[[10, 20, 30, 0], [10, 20, 30, 255]]], dtype=np.uint8), "RGBA")
    assert to_rgb8(rgba)[0].tolist() == [[255, 255, 255], [10, 20, 30]]  # transparent -> white
    f = Image.fromarray(np.array([[0.0, 0.5, 1.0]], dtype=np.float32))
    assert to_rgb8(f)[0, :, 0].tolist() == [0, 128, 255]


def test_build_from_mixed_mode_folder(tmp_path):
    d = tmp_path / "src"
    for k, mode in enumerate(["L", "RGBA", "I;16", "P"]):
        _photo(d / f"{mode.replace(';', '_')}.png", mode=mode, seed=k)
    out = data_prep.build_sr(tmp_path / "sr", 32, 2, 12, source=d, **QUIET)
    man = json.loads((out / "manifest.json").read_text())
    assert set(man["skipped"]["converted_modes"]) == {"L", "RGBA", "I;16", "P"}
    ds = F.open_dataset(out, "png")
    assert ds[0][1].shape == (32, 32, 3)


def test_same_seed_same_bytes(tmp_path):
    a = data_prep.build_sr(tmp_path / "a", 32, 2, 16, seed=7, flip=True, **QUIET)
    b = data_prep.build_sr(tmp_path / "b", 32, 2, 16, seed=7, flip=True, **QUIET)
    c = data_prep.build_sr(tmp_path / "c", 32, 2, 16, seed=8, flip=True, **QUIET)
    for side in ("hr", "lr"):
        for f in sorted((a / side).iterdir()):
            assert f.read_bytes() == (b / side / f.name).read_bytes(), f
    ma, mb, mc = (json.loads((x / "manifest.json").read_text()) for x in (a, b, c))
    assert ma["content_sha256"] == mb["content_sha256"] != mc["content_sha256"]
    # LR is the bicubic downscale of HR
    hr = np.asarray(Image.open(a / "hr" / "000003.png"))
    lr = np.asarray(Image.open(a / "lr" / "000003.png"))
    want = np.asarray(Image.fromarray(hr).resize((16, 16), Image.Resampling.BICUBIC))
    assert lr.shape == (16, 16, 3) and np.array_equal(lr, want)


def test_builtin_sources_have_variety(sr_root):
    man = json.loads((sr_root / "manifest.json").read_text())
    assert man["source"] == "builtin" and len([n for n, k in man["sources"].items() if k]) >= 5
    assert man["hr_shape"] == [32, 32, 3] and man["lr_shape"] == [16, 16, 3] and man["dtype"] == "uint8"
    for fmt in F.PACKABLE:
        entry = man["formats"][fmt]
        assert entry["bytes"] > 0 and entry["write_seconds"] >= 0
        assert entry["content_sha256"] == man["content_sha256"]


def test_interrupted_build_leaves_nothing(tmp_path, monkeypatch):
    from feedlab.formats import png as png_fmt

    real, calls = png_fmt.encode_png, []

    def flaky(arr):
        calls.append(1)
        if len(calls) > 9:
            raise KeyboardInterrupt
        return real(arr)

    monkeypatch.setattr(png_fmt, "encode_png", flaky)
    with pytest.raises(KeyboardInterrupt):
        data_prep.build_sr(tmp_path / "sr", 32, 2, 16, **QUIET)
    assert list(tmp_path.iterdir()) == []


def test_rebuild_replaces_atomically(tmp_path):
    out = data_prep.build_sr(tmp_path / "sr", 32, 2, 6, seed=1, **QUIET)
    data_prep.build_sr(out, 32, 2, 4, seed=2, **QUIET)
    assert len(list((out / "hr").iterdir())) == 4
    assert _leftovers(tmp_path) == []


def _copy_set(sr_root, tmp_path, formats) -> Path:
    dst = tmp_path / "sr"
    shutil.copytree(sr_root, dst, ignore=shutil.ignore_patterns(
        *[F.FORMATS[f].path.rstrip("/") for f in F.PACKABLE if f not in formats]))
    man = json.loads((dst / "manifest.json").read_text())
    man["formats"] = {k: v for k, v in man["formats"].items() if k in formats}
    (dst / "manifest.json").write_text(json.dumps(man))
    return dst


def test_verify_passes_on_good_set(sr_root):
    checked = data_prep.verify(sr_root, **QUIET)
    assert set(checked) == set(F.PACKABLE) and set(checked.values()) == {48}


def test_verify_names_format_and_index_npy(sr_root, tmp_path, capsys):
    root = _copy_set(sr_root, tmp_path, ["npy", "hdf5"])
    f = root / "npy" / "hr_000007.npy"
    data = bytearray(f.read_bytes())
    data[-5] ^= 0xFF  # a pixel byte, after the .npy header
    f.write_bytes(bytes(data))
    with pytest.raises(VerifyError) as err:
        data_prep.verify(root, **QUIET)
    msg = str(err.value)
    assert "npy: 1 bad sample(s): index 7" in msg and "hdf5" not in msg
    assert main(["verify", str(root), "--formats", "npy"]) == 1
    assert "index 7" in capsys.readouterr().err


def test_verify_names_format_and_index_lmdb(sr_root, tmp_path):
    root = _copy_set(sr_root, tmp_path, ["lmdb_raw"])
    from feedlab.formats import lmdb_store

    env = lmdb.open(str(root / "lmdb_raw"), subdir=True)
    with env.begin(write=True) as txn:
        v = bytearray(txn.get(lmdb_store.key(30)))
        v[-1] ^= 0x01
        txn.put(lmdb_store.key(30), bytes(v))
    env.close()
    with pytest.raises(VerifyError, match=r"lmdb_raw: 1 bad sample\(s\): index 30"):
        data_prep.verify(root, ["lmdb_raw"], **QUIET)


def test_verify_over_a_changed_png_says_rebuild_not_verify_again(sr_root, tmp_path, capsys):
    """attack52 B02: hr/000000.png replaced by another sample's: verify stopped opening the PNGs with "does not
    match its checksum (1 of 1 in this batch) … `python -m data_prep verify DIR` lists every bad sample, `pack DIR
    --to png` rewrites it": the advice pointed back at this very command, and the PNGs are the source."""
    root = _copy_set(sr_root, tmp_path, ["npy"])
    shutil.copyfile(root / "hr" / "000001.png", root / "hr" / "000000.png")
    before = sorted(p.name for p in root.iterdir())
    with pytest.raises(VerifyError) as err:
        data_prep.verify(root, **QUIET)
    msg = str(err.value)
    assert "sample 0" in msg and "hr/000000.png" in msg and "no longer matches the checksum" in msg, msg
    assert f"python -m data_prep sr --out {root}" in msg and "data_prep verify" not in msg and "\n" not in msg
    assert main(["verify", str(root)]) == 1
    err_lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err_lines) == 1 and "no longer matches the checksum" in err_lines[0], err_lines
    assert sorted(p.name for p in root.iterdir()) == before   # nothing written


def test_unknown_format_lists_supported(sr_root, capsys):
    assert main(["pack", str(sr_root), "--to", "lmdb,parquet"]) == 2
    err = capsys.readouterr().err
    assert "parquet" in err
    for name in F.PACKABLE:
        assert name in err
    with pytest.raises(DataPrepError, match="supported: lmdb"):
        data_prep.parse_formats("tfrecord")
    assert data_prep.parse_formats("png,all,lmdb") == list(F.PACKABLE)


def test_missing_source_dir_is_named(tmp_path, capsys):
    missing = tmp_path / "nope"
    assert main(["sr", "--out", str(tmp_path / "o"), "--source", str(missing), "--count", "2"]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err and "does not exist" in err
    assert main(["classify", "--out", str(tmp_path / "c"), "--source", str(missing)]) == 2


def test_pack_needs_an_sr_set(tmp_path, capsys):
    assert main(["pack", str(tmp_path), "--to", "npy"]) == 2
    assert "not an SR set" in capsys.readouterr().err


def test_ensure_sr_builds_only_what_is_missing(tmp_path):
    root = tmp_path / "sr"
    data_prep.ensure_sr(root, patch=32, scale=2, count=10, formats=("npy_mmap",), **QUIET)
    man1 = json.loads((root / "manifest.json").read_text())
    assert set(man1["formats"]) == {"npy_mmap"}
    stamp = (root / "hr" / "000000.png").stat().st_mtime_ns
    data_prep.ensure_sr(root, patch=32, scale=2, count=10, formats="npy_mmap,pt", **QUIET)
    man2 = json.loads((root / "manifest.json").read_text())
    assert set(man2["formats"]) == {"npy_mmap", "pt"}
    assert (root / "hr" / "000000.png").stat().st_mtime_ns == stamp  # not rebuilt
    assert man2["formats"]["npy_mmap"] == man1["formats"]["npy_mmap"]  # not repacked
    shutil.rmtree(root / "pt")
    data_prep.ensure_sr(root, patch=32, scale=2, count=10, formats=["pt"], **QUIET)
    assert len(F.open_dataset(root, "pt")) == 10
    data_prep.ensure_sr(root, patch=32, scale=2, count=12, formats=["pt"], **QUIET)  # new params: rebuild
    man3 = json.loads((root / "manifest.json").read_text())
    assert man3["count"] == 12 and set(man3["formats"]) == {"pt"}
    assert len(F.open_dataset(root, "pt")) == 12


def test_classify_from_class_folders(tmp_path):
    d = tmp_path / "src"
    for cname in ("cats", "dogs", "emus"):
        for k in range(2):
            _photo(d / cname / f"{k}.png", size=(120, 90), seed=hash((cname, k)) % 1000)
    (d / "dogs" / "bad.jpg").write_bytes(b"nope")
    with pytest.raises(DataPrepError, match="bad.jpg"):
        data_prep.build_cls(tmp_path / "cls", None, 3, min_size=40, max_size=80, source=d, **QUIET)
    out = data_prep.build_cls(tmp_path / "cls", 2, 3, min_size=40, max_size=80, source=d, skip_bad=True, **QUIET)
    ds = F.open_dataset(out, "jpeg")
    assert ds.classes == ["cats", "dogs"] and len(ds) == 6
    man = json.loads((out / "manifest.json").read_text())
    assert man["count"] == 6 and len(man["skipped"]["unreadable"]) == 1


def test_ensure_cls_idempotent_and_deterministic(tmp_path):
    a = data_prep.ensure_cls(tmp_path / "a", classes=2, per_class=3, min_size=32, max_size=48, **QUIET)
    stamp = (a / "manifest.json").stat().st_mtime_ns
    data_prep.ensure_cls(a, classes=2, per_class=3, min_size=32, max_size=48, **QUIET)
    assert (a / "manifest.json").stat().st_mtime_ns == stamp
    b = data_prep.build_cls(tmp_path / "b", 2, 3, min_size=32, max_size=48, **QUIET)
    ja = json.loads((a / "manifest.json").read_text())
    jb = json.loads((b / "manifest.json").read_text())
    assert ja["content_sha256"] == jb["content_sha256"] and ja["classes"] == ["astronaut", "chelsea"]


@pytest.mark.parametrize("fmt, file", [("lmdb_raw", "lmdb_raw"), ("hdf5", "sr.h5")])
def test_pack_under_a_file_size_limit_is_one_line_naming_the_file_and_the_fix(tmp_path, fmt, file):
    """`ulimit -f` gave a 20-line lmdb.Error traceback (and h5py's RuntimeError): one line naming the file,
    the limit and the fix, nothing half-written under the set or in TMPDIR (Python ignores SIGXFSZ: the
    write gets EFBIG, LMDB's commit EIO)."""
    import resource

    root = tmp_path / "sr"
    data_prep.build_sr(root, 64, 2, 48, seed=0, log=lambda _m: None)
    before = sorted(p.name for p in root.iterdir())
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    limit = 150_000

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = dict(os.environ, PYTHONPATH=f"{REPO / 'lib'}{os.pathsep}{REPO}", TMPDIR=str(tmp))
    r = subprocess.run([sys.executable, "-m", "data_prep", "pack", str(root), "--to", fmt], capture_output=True,
                       text=True, cwd=REPO, env=env, timeout=120, preexec_fn=small_files)
    assert r.returncode == 2, r.stderr[-2000:]
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in r.stderr and len(err) == 1, r.stderr[-2000:]
    assert f"{root / file}" in err[0] and f"{limit:,} bytes" in err[0] and "ulimit -f unlimited" in err[0], err[0]
    assert sorted(p.name for p in root.iterdir()) == before
    assert [p for p in tmp.iterdir() if not p.name.startswith("torchinductor_")] == []   # torch's own cache


def test_a_full_disk_or_an_lmdb_error_is_one_line_naming_the_file():
    import errno

    from data_prep.errors import write_failed

    target = Path("/data/sr/lmdb")
    full = write_failed("lmdb", target, OSError(errno.ENOSPC, "No space left on device"))
    assert "/data/sr/lmdb" in str(full) and "no space left" in str(full) and "df -h /data/sr" in str(full)
    lm = write_failed("lmdb", target, lmdb.Error("mdb_env_sync: No space left on device"))
    assert lm is not None and "no space left" in str(lm) and "\n" not in str(lm)
    lm = write_failed("lmdb", target, lmdb.Error("mdb_txn_commit: Input/output error"))
    assert lm is not None and "/data/sr/lmdb" in str(lm) and "LMDB" in str(lm)
    assert write_failed("lmdb", target, KeyError("x")) is None     # not a write error: not ours to word


def test_a_set_into_figures_is_refused_before_anything_is_written(src, tmp_path, monkeypatch, capsys):
    # attack49 N03/N04: `data_prep sr --out figures/zz` made a data set inside figures/, and with --force
    # `--out figures/<nb>/<machine>` put hr/, lr/ and a manifest into a committed record's folder, rc 0
    from feedlab import paths
    figs = tmp_path / "figures"
    record = figs / "04_print_overhead" / "cpu-2c"
    record.mkdir(parents=True)
    (record / "results.json").write_text("{}")
    monkeypatch.setattr(paths, "FIGURES_DIR", figs)
    for argv in (["sr", "--out", str(record), "--force"], ["sr", "--out", str(figs / "zz")],
                 ["classify", "--out", str(figs / "cls")], ["pack", str(record), "--to", "npy"]):
        extra = ["--source", str(src), "--patch", "32", "--count", "4"] if argv[0] == "sr" else []
        assert main(argv + extra) == 2
        err = capsys.readouterr().err
        assert f"data_prep {argv[0]}: error:" in err and "lies inside figures/" in err
    assert sorted(p.name for p in figs.rglob("*")) == ["04_print_overhead", "cpu-2c", "results.json"]


def test_a_second_signal_dropped_while_the_first_stops_the_command_gives_one_line_and_128_plus_n(
        tmp_path, monkeypatch, capsys):
    """``python -m data_prep pack`` given SIGHUP twice (a hang-up reaching the process and a wrapper that forwards
    it: timeout, make): the second landed where Python drops it (a ``__del__``) and was held for redelivery; the
    stop printed its line and returned 129, and then the held one was raised on the way out of the signal scope,
    past main's handling: a second line 'interrupted (Ctrl-C)' and exit 1 (attack51 P03)."""
    import signal

    from feedlab import procgroup, signal_scope

    pk = importlib.import_module("data_prep.pack")
    monkeypatch.setattr(signal_scope, "_send_later", lambda signum: None)   # redelivery is the way out's, not a thread's

    class Drops:
        def __del__(self):
            signal_scope._raise_signalled(signal.SIGHUP, None)   # the second SIGHUP, inside a __del__: dropped, held

    def two_hangups(root, to, **kw):
        holder = Drops()
        del holder
        raise procgroup.Signalled(signal.SIGHUP)             # the first one stops the pack

    monkeypatch.setattr(data_prep, "pack", two_hangups)
    monkeypatch.setattr(pk, "pack", two_hangups, raising=False)
    assert main(["pack", str(tmp_path), "--to", "npy"]) == 128 + signal.SIGHUP
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["data_prep pack: hangup (SIGHUP): no partial output left"], err
    assert not signal_scope._PENDING
    assert signal.getsignal(signal.SIGHUP) is not signal_scope._raise_dropped


def test_a_tilde_that_cannot_be_expanded_is_one_line_never_a_folder_named_tilde(tmp_path, monkeypatch, capsys):
    """attack57 W1: `data_prep sr --out '~nosuchuser9/x'` (quoted, as from a config file) made a folder named
    `~nosuchuser9` in the current folder, rc 0; FEEDLAB_DATA='~nosuchuser9/d' did the same for the default."""
    from feedlab import paths

    monkeypatch.chdir(tmp_path)
    assert main(["sr", "--out", "~nosuchuser9/x", "--count", "2"]) == 2
    err = capsys.readouterr().err
    assert "--out '~nosuchuser9/x': no user nosuchuser9" in err and len(err.strip().splitlines()) == 1, err
    monkeypatch.setitem(paths._ENV_PROBLEMS, "FEEDLAB_DATA", "FEEDLAB_DATA '~nosuchuser9/d': no user nosuchuser9")
    assert main(["classify", "--per-class", "1"]) == 2
    assert "FEEDLAB_DATA '~nosuchuser9/d'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
