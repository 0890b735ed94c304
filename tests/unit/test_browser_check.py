"""tests/browser_check.py's judgement of a rendered notebook page (the browser itself runs in CI)."""

from __future__ import annotations

import base64
import io
import json

import matplotlib

matplotlib.use("Agg")

from tests import browser_check as B  # noqa: E402


def _png(w: int, h: int) -> str:
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(w / 100, h / 100), dpi=100)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def test_png_size_reads_the_header():
    assert B.png_size(base64.b64decode(_png(320, 200))) == (320, 200)
    assert B.png_size(b"not a png") == (0, 0)


def test_expected_counts_the_notebooks_images_errors_and_warnings(tmp_path):
    nb = {"cells": [{"cell_type": "code", "outputs": [
        {"output_type": "display_data", "data": {"image/png": _png(300, 200), "text/plain": "<Figure>"}},
        {"output_type": "stream", "name": "stderr", "text": "UserWarning: ..."},
        {"output_type": "error", "ename": "ValueError", "evalue": "x", "traceback": []}]}]}
    p = tmp_path / "n.ipynb"
    p.write_text(json.dumps(nb))
    assert B.expected(p) == {"images": [(300, 200)], "errors": 1, "stderr": 1}


def _page(images, error=False, cells=3):
    imgs = "".join(f'<img src="data:image/png;base64,{_png(*s)}">' for s in images)
    err = f'<div data-mime-type="{B.ERROR_MIME}">Traceback</div>' if error else ""
    warn = f'<div data-mime-type="{B.STDERR_MIME}">UserWarning</div>'
    return "<html><body>" + '<div class="jp-Cell"></div>' * cells + imgs + err + warn + "</body></html>"


def test_a_page_with_every_figure_and_no_error_passes():
    want = {"images": [(300, 200), (400, 300)], "errors": 0, "stderr": 0}
    dom = B.read_dom(_page([(300, 200), (400, 300)]))
    assert len(dom.images) == 2 and dom.stderr == 1 and dom.cells == 3
    assert B.judge("nb", want, dom) == []


def test_missing_tiny_figures_errors_and_an_empty_page_fail():
    want = {"images": [(300, 200), (400, 300)], "errors": 0, "stderr": 0}
    assert B.judge("nb", want, B.read_dom(_page([(300, 200)]))) == ["nb: 1 of its 2 figures rendered"]
    assert "smaller than 100 px: 300×40" in B.judge("nb", want, B.read_dom(_page([(300, 200), (300, 40)])))[0]
    assert B.judge("nb", want, B.read_dom(_page([(300, 200), (400, 300)], error=True))) == \
        ["nb: 1 error output(s) show"]
    assert B.judge("nb", want, B.read_dom("<html></html>")) == ["nb: no notebook cell rendered (the page did not load)"]


def test_without_chromium_it_says_so_in_one_line_and_passes(monkeypatch, capsys):
    monkeypatch.setattr(B, "find_chromium", lambda: None)
    assert B.main([]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("browser check skipped: no Chromium")


def _record(folder, images: int, pngs: int):
    import json

    folder.mkdir(parents=True, exist_ok=True)
    outs = [{"output_type": "display_data", "data": {"image/png": _png(300, 200)}, "metadata": {}}] * images
    nb = folder / "x.executed.ipynb"
    findings = {"cell_type": "markdown", "source": "## Findings\n\n![f0](f0.png)\n", "metadata": {}}  # key figure
    nb.write_text(json.dumps({"cells": [findings, {"cell_type": "code", "source": "", "outputs": outs}]}))
    for i in range(pngs):
        (folder / f"f{i}.png").write_bytes(b"png")
    return nb


def test_a_record_that_shows_fewer_figures_than_its_run_wrote_fails_without_a_browser(tmp_path, monkeypatch,
                                                                                        capsys):
    """The h100 records made under MPLBACKEND=Agg held their figures only as files: a reader saw none."""
    monkeypatch.setattr(B, "find_chromium", lambda: None)
    bare, full = _record(tmp_path / "a", 0, 2), _record(tmp_path / "b", 2, 2)
    assert B.unshown_figures(bare) == "shows 0 of the 2 figure files beside it"
    assert B.unshown_figures(full) is None
    assert B.main([str(full)]) == 0
    assert B.main([str(bare)]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_the_committed_records_show_every_figure_file_they_wrote():
    bad = [str(p) for p in sorted(B.REPO.glob("figures/*/*/*.executed.ipynb")) if B.unshown_figures(p)]
    assert bad == []


def test_a_record_whose_findings_do_not_show_the_key_figure_is_named(tmp_path):
    """Issue 48: each executed record shows its key figure in its first cell (the findings), under the readings."""
    import json

    from feedlab import findings

    nb = tmp_path / "99_x.executed.ipynb"
    nb.write_text(json.dumps({"cells": [{"cell_type": "code", "source": "x", "outputs": [], "metadata": {}}],
                              "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    (tmp_path / "alpha.png").write_bytes(b"png")
    assert "does not show its key figure" in B.key_figure_unshown(nb)
    (tmp_path / "results.json").write_text("{}")
    assert findings.add_findings(nb)
    assert B.key_figure_unshown(nb) is None
    first = "".join(json.loads(nb.read_text())["cells"][0]["source"])
    assert "![alpha](alpha.png)" in first
