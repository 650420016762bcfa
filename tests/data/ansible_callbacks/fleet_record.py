"""Ansible callback for the fleet tests: every task result and the recap per host, as one JSON file.

ansible-core has no machine-readable stdout callback of its own; this one is enabled only by the
tests (ANSIBLE_CALLBACKS_ENABLED=fleet_record) and writes to $FLEET_RECORD when the playbook ends.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):  # type: ignore[misc]
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "fleet_record"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self.results: List[Dict[str, Any]] = []

    def _record(self, result: Any, status: str) -> None:
        self.results.append(
            {
                "host": result._host.get_name(),
                "task": result._task.name,
                "status": status,
                "result": result._result,
            }
        )

    def v2_runner_on_ok(self, result: Any) -> None:
        self._record(result, "ok")

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._record(result, "failed")

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._record(result, "skipped")

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._record(result, "unreachable")

    def v2_playbook_on_stats(self, stats: Any) -> None:
        recap = {host: stats.summarize(host) for host in sorted(stats.processed)}
        with open(os.environ["FLEET_RECORD"], "w") as out:
            json.dump({"stats": recap, "results": self.results}, out, default=str)
