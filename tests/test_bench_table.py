"""bench/table.py: the README's table of figures is what the committed results files say (the test fails
when one was edited by hand or a results file changed without regenerating it), and a ratio whose rounds'
ranges overlap is said as parity."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import table  # noqa: E402


def test_the_readmes_table_is_generated_from_the_committed_results():
    docs = table.load()
    assert any(k.startswith("e2e-") for k in docs), "bench/results/ holds no network figures"
    block = table.readme_block((ROOT / "README.md").read_text())
    assert block == table.table(docs), "README.md's figures differ from bench/results/*.json: run " \
                                       "python bench/table.py --write"


def test_every_network_row_comes_from_one_run_and_names_its_trials():
    docs = {k: v for k, v in table.load().items() if k.startswith("e2e-")}
    # e2e-NET@CHANGE: a later run of one network; the float32 rows (every network) are one run's, a
    # quantized network's row its own run's (e2e-NET_int8)
    headline = {k: v for k, v in docs.items() if "@" not in k and v["figures"].get("precision", "float32") == "float32"}
    assert set(headline) == {f"e2e-{t}" for t in table.NETS}
    assert len({(d["command"], d["run_started"]) for d in headline.values()}) == 1
    for d in docs.values():
        last = d["figures"]["stages"][-1]
        assert last["trials_this_run"] > 0 and "from_scratch" in last
        assert all(len(t["rounds"]) == d["figures"]["rounds"] for t in last["seconds"].values())


def test_overlapping_rounds_are_parity_and_apart_ones_a_ratio():
    t = lambda med, lo, hi: {"median": med, "min": lo, "max": hi}
    assert table.ratio(t(2.0, 1.8, 2.2), t(1.0, 0.9, 1.1)) == "**2.00x**"
    assert table.ratio(t(1.1, 1.0, 1.3), t(1.0, 0.9, 1.05)) == "parity (1.10x, ranges overlap)"
    assert table.ratio(t(1.0, 0.9, 1.1), t(2.0, 1.8, 2.2)) == "0.50x (slower)"
