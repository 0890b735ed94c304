"""11_worker_hygiene's figure, reading and payload (feedlab.experiments._hygiene_readings), on
summaries of Results frames shaped as worker_hygiene's tables write them: no worker starts here."""

from __future__ import annotations

import json
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from feedlab.experiments import _hygiene_readings as R  # noqa: E402
from feedlab.experiments import worker_hygiene as W  # noqa: E402
from feedlab.report import claims as C  # noqa: E402
from feedlab.results import Results, summarize  # noqa: E402

CPU = {"cuda_available": False, "gpus": [], "cpu_usable": 2, "cpu_logical": 2}
METRICS = ("workers_started", "alive_after_stop", "alive_after_del", "leftover", "terminated", "cleanup_s")


def hyg_sum(held_alive=2, scenarios=W.SCENARIOS, repeats=3):
    """As hygiene_table records it: 2 workers each; the held traceback keeps ``held_alive`` after del."""
    res = Results()
    for sc in scenarios:
        for r in range(repeats):
            vals = {"workers_started": 2, "alive_after_stop": 2, "leftover": 0, "terminated": 0,
                    "alive_after_del": held_alive if sc == "held_traceback" else 0, "cleanup_s": 0.05 + 0.01 * r}
            for m in METRICS:
                res.add("worker_hygiene", sc, m, vals[m], "s" if m == "cleanup_s" else "processes", r,
                        scenario=sc, num_workers=2, raised="none")
    return summarize(res.frame(), ["scenario", "metric"])


def errc_sum():
    """As error_cleanup_table records it: the plain loop waits out the 5 s join timeout."""
    res = Results()
    for loop, (base, term) in {"plain": (5.0, 2), "feedlab": (0.02, 0), "fix": (0.03, 0)}.items():
        for r in range(3):
            for m, v in (("cleanup_s", base + 0.1 * r), ("terminated", term), ("leftover", 0)):
                res.add("error_cleanup", loop, m, v, "s" if m == "cleanup_s" else "processes", r, loop=loop,
                        num_workers=2)
    return summarize(res.frame(), ["loop", "metric"])


def pw_sum(later=(0.5, 0.01)):
    """As persistent_workers_table records it: 1 s to start the workers in epoch 0, then ``later``
    (without, with persistent workers) in epochs 1 and 2."""
    res = Results()
    for persistent in (False, True):
        for r in range(3):
            for e in range(3):
                v = 1.0 if e == 0 else later[int(persistent)]
                res.add("persistent_workers", f"persistent={persistent}", "first_batch_s", v, "s", r,
                        persistent_workers=persistent, epoch=e, num_workers=2, batch_size=8)
    return summarize(res.frame(), ["persistent_workers", "epoch"])


def pf_sum(rates=None):
    rates = rates or {1: 90.0, 2: 100.0, 4: 110.0, 8: 120.0}
    res = Results()
    for f, v in rates.items():
        for r in range(3):
            res.add("prefetch_factor", f"pf{f}", "steady_samples_per_s", v, "samples/s", r, prefetch_factor=f)
    return summarize(res.frame(), ["prefetch_factor"])


def lines(**kw):
    return R.readings(kw.get("hyg", hyg_sum()), kw.get("errc", errc_sum()), kw.get("pw", pw_sum()),
                      kw.get("pf", pf_sum()))


def test_one_line_per_way_of_stopping():
    out = lines()
    brk = next(s for s in out if s.startswith("break:"))
    assert brk.startswith("break: 2 workers started, 2 alive when the loop stopped, 0 after del + gc, "
                          "0 left after the bounded wait, 0 terminated after a 5 s join timeout")
    assert brk.endswith("cleanup took 0.06 s (median).")
    assert [s.split(":")[0] for s in out[:4]] == list(W.SCENARIOS)
    assert out[3].startswith("held_traceback: 2 workers started, 2 alive when the loop stopped, 2 after del + gc")


def test_worker_error_lines_give_the_iqr_and_terminations():
    out = lines()
    assert ("worker error, plain loop: workers gone 5.10 s (IQR 5.05–5.15) after the exception reached the caller; "
            "2 terminated after a join timeout.") in out
    assert any(s.startswith("worker error, feedlab loop: workers gone 0.12 s") and s.endswith("0 terminated after "
               "a join timeout.") for s in out)
    assert sum(s.startswith("worker error,") for s in out) == 3


@pytest.mark.parametrize("alive, said", [(2, True), (0, False)])
def test_held_traceback_sentence_only_when_workers_outlive_del(alive, said):
    out = lines(hyg=hyg_sum(held_alive=alive))
    assert any(s.startswith("A held traceback keeps the iterator") for s in out) is said


def test_no_held_traceback_scenario_no_sentence():
    out = lines(hyg=hyg_sum(scenarios=("break", "worker_error")))
    assert not any("held traceback" in s for s in out)
    assert sum(": 2 workers started" in s for s in out) == 2


def test_persistent_workers_first_batch_and_ratio():
    out = lines()
    pw = next(s for s in out if s.startswith("First batch of epoch 0"))
    assert pw == ("First batch of epoch 0: 1.000 s vs 1.000 s; of later epochs: 0.500 s without persistent workers, "
                  "0.010 s with them (50.0×).")
    slower = next(s for s in lines(pw=pw_sum(later=(0.2, 0.4))) if s.startswith("First batch"))
    assert slower.endswith("0.200 s without persistent workers, 0.400 s with them (0.5×).")


def test_persistent_workers_one_side_missing_reads_nan_not_a_crash():
    only = pw_sum()
    only = only[~only.persistent_workers]
    pw = next(s for s in lines(pw=only) if s.startswith("First batch"))
    assert "nan s with them (nan×)" in pw


def test_prefetch_best_and_worst():
    out = lines(pf=pf_sum({1: 150.0, 2: 100.0, 4: 300.0, 8: 120.0}))
    assert out[-1] == "prefetch_factor: best 300 samples/s at 4, worst 100 at 2 (3.00×)."
    assert lines(pf=pf_sum({2: 80.0}))[-1] == "prefetch_factor: best 80 samples/s at 2, worst 80 at 2 (1.00×)."


def test_title_and_reexports():
    t = R.title(pw_sum(), pf_sum(), 3)
    assert "×50 sooner" in t and "prefetch_factor 8: ×1.2 the default 2" in t
    assert t.endswith(" (median, bars = IQR over 3 repeats)")
    assert W.readings is R.readings and W.payload is R.payload and W.title is R.title
    assert W.plot_persistent_and_prefetch is R.plot_persistent_and_prefetch


def test_plot_draws_both_panels():
    fig, axes = plt.subplots(1, 2)
    try:
        R.plot_persistent_and_prefetch(axes, pw_sum(), pf_sum(), num_workers=2, batch_size=8,
                                       prefetch_factors=[1, 2, 4, 8])
        ax1, ax2 = axes
        assert ax1.get_yscale() == "log" and ax2.get_xscale() == "log"
        assert sorted(t.get_text() for t in ax1.get_legend().get_texts()) == ["persistent\nworkers",
                                                                             "workers started\nevery epoch"]
        assert [t.get_text() for t in ax2.get_xticklabels()] == ["1", "2", "4", "8"]
        assert ax1.get_title(loc="left") == "PNG pairs, 2 workers, batch 8"
        assert ax2.get_ylim()[0] == 0
    finally:
        plt.close(fig)


def test_payload_keys_types_and_json():
    P = SimpleNamespace(profile="quick", num_workers=2)
    pay = R.payload(P, hyg_sum(), errc_sum(), pw_sum(), pf_sum())
    assert set(pay) == {"notebook", "profile", "num_workers", "scenarios", "error_cleanup",
                        "first_batch_s_later_epochs", "prefetch_samples_per_s"}
    assert pay["notebook"] == "11_worker_hygiene" and type(pay["num_workers"]) is int
    assert list(pay["scenarios"]) == list(W.SCENARIOS)
    assert set(pay["scenarios"]["held_traceback"]) == set(METRICS)
    assert pay["scenarios"]["held_traceback"]["alive_after_del"] == 2.0
    assert all(type(v) is float for row in pay["scenarios"].values() for v in row.values())
    assert set(pay["error_cleanup"]) == {"plain", "feedlab", "fix"}
    assert pay["error_cleanup"]["plain"]["terminated"] == 2.0
    assert pay["first_batch_s_later_epochs"] == {"False": 0.5, "True": 0.01}
    assert pay["prefetch_samples_per_s"] == {1: 90.0, 2: 100.0, 4: 110.0, 8: 120.0}
    assert all(type(k) is int for k in pay["prefetch_samples_per_s"])
    back = json.loads(json.dumps(pay))
    assert back["scenarios"] == pay["scenarios"] and set(back["prefetch_samples_per_s"]) == {"1", "2", "4", "8"}


@pytest.mark.parametrize("alive, status", [(2, C.PARTLY), (0, C.NOT_REPRODUCED)])
def test_the_claims_ledger_reads_the_payload(alive, status):
    pay = R.payload(SimpleNamespace(profile="quick", num_workers=2), hyg_sum(held_alive=alive), errc_sum(),
                    pw_sum(), pf_sum())
    v = C.judge(C.BY_ID["001-daemon-workers"], C.Run(pay, fingerprint=CPU))
    assert v.status == status, v
    assert ("held_traceback" in v.ours) is bool(alive)


def test_notebook_reads_through_the_library():
    from feedlab.paths import NOTEBOOKS_DIR

    nb = json.loads((NOTEBOOKS_DIR / "11_worker_hygiene.ipynb").read_text())
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "\ndef " not in f"\n{code}" and "payload = {" not in code and ".iterrows()" not in code
    assert "W.readings(hyg_sum, errc_sum, pw_sum, pf_sum)" in code and "W.payload(" in code
    assert "W.plot_persistent_and_prefetch(" in code and "set_yscale" not in code
