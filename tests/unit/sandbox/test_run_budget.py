"""tests/run.py's time budget: read from docs/development.md (its one owner), each gate's time shown against its
budget, the total against 3450 s, and a gate over its budget named."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("vllmops_run", ROOT / "tests/run.py")
run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run)


def test_every_gate_has_a_budget_in_the_docs_and_they_fit_the_total():
    budget = run.budgets()
    assert set(budget) == set(run.GATES), set(run.GATES) ^ set(budget)
    # molecule's and sandbox's times include the gates beside them: those are not added again
    alone = sum(seconds for name, seconds in budget.items() if name not in run.BESIDE_MOLECULE + run.BESIDE_SANDBOX)
    assert alone <= run.TOTAL_BUDGET_S, (alone, budget)


def test_a_gate_over_its_budget_is_named_and_the_total_is_shown_against_the_whole(tmp_path):
    doc = tmp_path / "development.md"
    doc.write_text("## Other\n| `ruff` | 1 |\n### Time budget\n\n| gate | budget (s) | note |\n|---|---|---|\n"
                   "| `ruff` | 5 | lint |\n| `sandbox` | 100 | |\n## After\n| `pytest` | 3 |\n")
    budget = run.budgets(doc)
    assert budget == {"ruff": 5, "sandbox": 100}
    rows = run.budget_report([("ruff", 0, 2.0), ("sandbox", 1, 130.0), ("pytest", 0, 9.0)], 141.0, budget)
    assert rows[0].split() == ["PASS", "ruff", "2.0", "s", "of", "5", "s"]
    assert rows[1].split()[-1] == "OVER" and rows[1].startswith("FAIL  sandbox")
    assert "(no budget)" in rows[2]
    assert rows[3] == "total 141 s of 3450 s (4 %)"
    assert rows[4] == "over budget: sandbox (130 s of 100 s) (docs/development.md, Time budget)"
    assert run.budget_report([], 3500.0, budget)[0].endswith("OVER")
