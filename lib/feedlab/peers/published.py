"""The peers' own published loader throughput — published, not measured here.

One row per published figure: what the authors measured (data, resolution, pipeline), on
how many vCPUs, with the source. :func:`per_vcpu` divides by the vCPUs so a reader can set
this run's per-core rate beside it (:func:`feedlab.peers.report.published_table`). These
numbers were not measured by feedlab; a peer with no row here has published no absolute
rate per machine that we found (``NONE_PUBLISHED`` says what was looked at).
"""

from __future__ import annotations

LABEL = "published, not measured here"

# (peer, what, images/s, vCPUs, machine, source URL)
PUBLISHED: list[dict] = [
    {"peer": "ffcv", "what": "ImageNet RAW 256 px from RAM, random-resized crop 224 + flip", "kind": "sr",
     "images_per_s": 172_801, "vcpus": 96, "machine": "AWS p3dn.24xlarge",
     "source": "https://docs.ffcv.io/benchmarks.html (docs/benchmarks.rst in github.com/libffcv/ffcv)"},
    {"peer": "ffcv", "what": "ImageNet JPEG 90% 512 px from RAM, random-resized crop 224 + flip", "kind": "cls",
     "images_per_s": 31_278, "vcpus": 96, "machine": "AWS p3dn.24xlarge",
     "source": "https://docs.ffcv.io/benchmarks.html (docs/benchmarks.rst in github.com/libffcv/ffcv)"},
]

NONE_PUBLISHED: dict[str, str] = {
    "spdl": "none published as an absolute rate per machine: its docs and paper report speed-ups relative to "
            "the DataLoader (github.com/facebookresearch/spdl, docs/source)",
    "mosaic_streaming": "none published by its authors for local reads; LitData's benchmark page reports it "
                        "streaming ImageNet from S3 (https://lightning.ai/docs/litdata/benchmarks), vCPUs not stated",
}


def per_vcpu(row: dict) -> float:
    return row["images_per_s"] / row["vcpus"]


def rows_for(peer: str, kind: str | None = None) -> list[dict]:
    return [r for r in PUBLISHED if r["peer"] == peer and (kind is None or r["kind"] == kind)]


__all__ = ["LABEL", "NONE_PUBLISHED", "PUBLISHED", "per_vcpu", "rows_for"]
