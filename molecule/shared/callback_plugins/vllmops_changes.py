"""Molecule-only callback: which tasks changed on which host, one JSON line per
playbook run, in $MOLECULE_EPHEMERAL_DIRECTORY/changes.jsonl. The check step
and the converge that follows run the same playbook: comparing their lines
shows whether check mode predicted the real run (check_predicted.yml)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ansible import context
from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: vllmops_changes
type: aggregate
short_description: record the changed tasks of each playbook run (molecule only)
description:
  - Appends C({"playbook", "check", "changed"}) to C($MOLECULE_EPHEMERAL_DIRECTORY/changes.jsonl).
  - Does nothing outside molecule.
requirements:
  - enabled in callbacks_enabled
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "vllmops_changes"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._playbook = ""
        self._changed: set[str] = set()

    def v2_playbook_on_start(self, playbook) -> None:
        self._playbook = Path(playbook._file_name).name

    def v2_runner_on_ok(self, result) -> None:
        if result.is_changed():
            self._changed.add(f"{result.host.get_name()}: {result.task.get_name()}")

    def v2_playbook_on_stats(self, stats) -> None:
        directory = os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY")
        if not directory or not self._playbook:  # ad hoc commands have no playbook
            return
        line = {"playbook": self._playbook, "check": bool(context.CLIARGS.get("check")), "changed": sorted(self._changed)}
        with Path(directory, "changes.jsonl").open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")
