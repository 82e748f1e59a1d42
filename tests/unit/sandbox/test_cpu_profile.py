"""scripts/cpu-profile's report: CPU seconds per command, and each process's CPU spread over the minutes it lived."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "cpu-profile"
_loader = importlib.machinery.SourceFileLoader("cpu_profile", str(SCRIPT))
_spec = importlib.util.spec_from_loader("cpu_profile", _loader)
cpu_profile = importlib.util.module_from_spec(_spec)
_loader.exec_module(cpu_profile)


def test_the_report_names_where_the_cpu_went_and_spreads_it_over_each_process_life():
    rows = [
        # (command, CPU s, started, ended): a module run on a node, a worker, a long vLLM rank over two minutes
        ("python3.13", 0.3, 1000.0, 1001.0),
        ("ansible-playboo", 0.1, 1000.0, 1000.5),
        ("VLLM::Worker_TP", 60.0, 1030.0, 1150.0),
    ]
    text = cpu_profile.report(rows, began=1000.0, ended=1120.0, python="python3.13")
    lines = text.splitlines()
    assert lines[0].startswith("120 s wall, 60 s CPU in 3 processes"), lines[0]
    by_name = [line.split() for line in lines[3:6]]
    assert [(row[0], row[2]) for row in by_name] == [("60.0", "VLLM::Worker_TP"), ("0.3", "python3.13"),
                                                      ("0.1", "ansible-playboo")], by_name
    minutes = {int(line.split()[0]): line.split() for line in lines if line[:6].strip().isdigit()}
    # minute 0: 0.4 s of Ansible + 15 s of the rank (30 of its 120 s); minute 1: 30 s of the rank; 2 cores or more
    cores = cpu_profile.os.cpu_count()
    assert minutes[0][1] == f"{100 * 15.4 / (60 * cores):.0f}" and minutes[0][3] == f"{100 * 0.4 / (60 * cores):.0f}", minutes
    assert minutes[1][1] == f"{100 * 30 / (60 * cores):.0f}" and minutes[1][3] == "0", minutes
