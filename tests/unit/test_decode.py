"""Every available decoder returns the same HWC uint8 RGB pixels; unavailable ones say why."""

from __future__ import annotations

import io

import numpy as np
import pytest

from feedlab import decode as dec


def _image(h=24, w=20, seed=0):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 // w, y * 255 // h, (x + y) * 127 // (h + w)], axis=2)
    return np.clip(base + rng.integers(0, 20, (h, w, 3)), 0, 255).astype(np.uint8)


def _encode(arr, fmt, mode="RGB"):
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(arr).convert(mode).save(buf, fmt, **({"quality": 95} if fmt == "JPEG" else {}))
    return buf.getvalue()


AVAILABLE = {n for n, i in dec.available_backends().items() if i.available}


def test_report_covers_every_backend():
    info = dec.available_backends()
    assert set(info) == set(dec.BACKENDS)
    for name, b in info.items():
        assert b.name == name and isinstance(b.available, bool)
        available, hint = b  # the two-field form of docs/ARCHITECTURE.md
        if not available:
            assert hint, f"{name} unavailable without a reason"
    assert info["pil"].available
    assert "conda-forge" in (info["accimage"].reason if not info["accimage"].available else "conda-forge")
    assert info["pillow-simd"].available == dec.is_pillow_simd()


def test_supports():
    assert dec.supports("simplejpeg", "jpeg") and not dec.supports("simplejpeg", "png")
    assert dec.supports("pyspng", "png") and not dec.supports("pyspng", "jpg")
    assert dec.supports("pil", "PNG")
    with pytest.raises(ValueError, match="one of"):
        dec.supports("opencv", "jpeg")
    with pytest.raises(ValueError):
        dec.supports("pil", "gif")


@pytest.mark.parametrize("kind,fmt", [("jpeg", "JPEG"), ("png", "PNG")])
@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA"])
def test_backends_agree(kind, fmt, mode):
    if kind == "jpeg" and mode == "RGBA":
        pytest.skip("JPEG has no alpha")
    arr = _image()
    data = _encode(arr, fmt, mode)
    ref = dec.decode(data, "pil")
    assert ref.shape == (24, 20, 3) and ref.dtype == np.uint8
    if kind == "png" and mode == "RGB":
        assert np.array_equal(ref, arr)  # lossless
    for be in sorted(AVAILABLE):
        if not dec.supports(be, kind):
            continue
        got = dec.decode(data, be)
        assert got.shape == ref.shape and got.dtype == np.uint8 and got.flags.c_contiguous, be
        # JPEG decoders built on different libjpeg-turbo versions may differ by a level or two
        tol = 0 if kind == "png" else 3
        assert int(np.abs(got.astype(int) - ref).max()) <= tol, be
        out = np.zeros_like(ref)
        assert dec.decode(data, be, out=out) is out and np.array_equal(out, got), be
        assert np.array_equal(dec.decode(memoryview(data), be), got), be
        assert np.array_equal(dec.decode(np.frombuffer(data, np.uint8), be), got), be


def test_unknown_and_unavailable_backends():
    data = _encode(_image(), "JPEG")
    with pytest.raises(ValueError, match="one of"):
        dec.decode(data, "nope")
    missing = [n for n in dec.BACKENDS if n not in AVAILABLE and n not in ("cuda", "pillow-simd")]
    for be in missing:
        with pytest.raises(RuntimeError, match="unavailable"):
            dec.decode(data, be)


def test_decode_resize_uses_draft_for_big_jpeg():
    big = np.repeat(np.repeat(_image(32, 32), 8, axis=0), 8, axis=1)  # 256x256
    data = _encode(big, "JPEG")
    img, info = dec.decode_resize(data, 48, "pil", return_info=True)
    assert img.shape == (48, 48, 3)
    assert info["draft"] and info["decoded_hw"] == (64, 64) and info["source_hw"] == (256, 256)
    img2, info2 = dec.decode_resize(data, (48, 40), "pil", use_draft=False, return_info=True)
    assert img2.shape == (48, 40, 3) and not info2["draft"]
    if "simplejpeg" in AVAILABLE:
        img3, info3 = dec.decode_resize(data, 48, "simplejpeg", return_info=True)
        assert img3.shape == (48, 48, 3) and info3["draft"]
        assert np.abs(img3.astype(int) - img.astype(int)).mean() < 8
    png = _encode(big, "PNG")
    img4, info4 = dec.decode_resize(png, 48, "pil", return_info=True)
    assert img4.shape == (48, 48, 3) and not info4["draft"]


def test_with_image_backend_restores():
    torchvision = pytest.importorskip("torchvision")
    before = torchvision.get_image_backend()
    with dec.with_image_backend("pil"):
        assert torchvision.get_image_backend() == "PIL"
    assert torchvision.get_image_backend() == before
    if "accimage" not in AVAILABLE:
        with pytest.raises(RuntimeError, match="conda"):
            with dec.with_image_backend("accimage"):
                pass
    with pytest.raises(ValueError):
        with dec.with_image_backend("opencv"):
            pass


def test_decoder_handle():
    data = _encode(_image(), "JPEG")
    fn = dec.decoder("pil")
    assert np.array_equal(fn(data), dec.decode(data, "pil"))
