"""The doctor prices ``decode="cuda"``: a JPEG format's batch decoded on the device (nvJPEG).

Measured on a CUDA machine only (never advised without one): ``read`` is the store's read of the
encoded bytes (as the CPU decoders' read), ``decode`` the device time per image of one batched call
that decodes, crops and resizes a batch of the doctor's samples (``gpu_decode.EncodedBatch.decode_to``,
synchronised), ``transform`` zero (the crop and resize are inside it). ``doctor.predict.costs`` moves
that decode into the main process beside the host-to-device copy, where the loop runs it.
"""

from __future__ import annotations

from feedlab import formats
from feedlab.gpu_decode import EncodedBatch, EncodedView

from .costs import CostKey, Stage

NAME = "cuda"


def measure_device_decode(doc, fmt: str, batch: int, device: str | None = None, size: int = 96) -> bool:
    """Fill the ``(stage, fmt, "cuda")`` rows of ``doc.table``; False (and a note) when the format
    holds no JPEG or the split cannot give its encoded bytes. ``device`` overrides the doctor's
    (tests run the control flow on the CPU decoder)."""
    fs = formats.FORMATS.get(fmt)
    if fs is None or fs.image_codec != "jpeg":
        return False
    p = doc.split(fmt, fs.default_decode)
    view = EncodedView(p.dataset, size)
    idx = doc._indices(len(p))
    items = [view[i] for i in idx]
    if not items:
        return False
    datas = [items[k % len(items)][0] for k in range(max(int(batch), 1))]
    b = EncodedBatch(datas, size)
    dev = device or doc.device
    w, c = doc._t(lambda: b.decode_to(dev), len(datas), device=dev)
    read = doc.table.get(CostKey("read", fmt, fs.default_decode))
    if read is not None:
        doc.table[CostKey("read", fmt, NAME)] = read
    doc.table[CostKey("decode", fmt, NAME)] = Stage("decode", f"{fmt}: nvJPEG batch of {len(datas)} on {dev} "
                                                       f"(+ crop, resize)", w, c)
    doc.table[CostKey("transform", fmt, NAME)] = Stage("transform", "on the device, inside decode", [0.0], [0.0])
    return True
