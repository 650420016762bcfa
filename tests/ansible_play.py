"""``ansible-playbook`` run hermetically from a test, and what the run did.

Ansible's config, HOME and temp directories are under the test's own directory, and a small
callback (tests/data/ansible_callbacks) records the recap and every task result as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List

CALLBACKS = Path(__file__).resolve().parent / "data" / "ansible_callbacks"


@dataclass
class Play:
    """One ansible-playbook run: exit code, output, recap per host and every task result."""

    returncode: int
    output: str
    stats: Dict[str, Dict[str, int]]
    results: List[Dict[str, Any]]

    def changed(self) -> Dict[str, int]:
        """``changed=`` of the recap, per host that ran."""
        return {host: s["changed"] for host, s in self.stats.items()}

    def task(self, host: str, name: str) -> Dict[str, Any]:
        """The result of task ``name`` on ``host`` (the last one, if it ran several times)."""
        found = [r for r in self.results if r["host"] == host and r["task"] == name]
        assert found, f"{name} did not run on {host}:\n{self.output[-4000:]}"
        return found[-1]


def run_playbook(tmp: Path, args: Sequence[str], *, env: Mapping[str, str], timeout: float) -> Play:
    """``ansible-playbook ARGS`` with its config, HOME and temp dirs under ``tmp``; ``env`` adds to the environment."""
    (tmp / "ansible.cfg").write_text("[defaults]\n")
    record = tmp / "record.json"
    record.unlink(missing_ok=True)
    home = tmp / "home"
    hermetic = {
        **os.environ,
        "HOME": str(home),
        "ANSIBLE_CONFIG": str(tmp / "ansible.cfg"),
        "ANSIBLE_HOME": str(home / ".ansible"),
        "ANSIBLE_LOCAL_TEMP": str(home / "local-tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_CALLBACK_PLUGINS": str(CALLBACKS),
        "ANSIBLE_CALLBACKS_ENABLED": "fleet_record",
        "FLEET_RECORD": str(record),
        **env,
    }
    argv = [str(Path(sys.executable).with_name("ansible-playbook")), *args]
    done = subprocess.run(argv, env=hermetic, capture_output=True, text=True, timeout=timeout, check=False)
    data = json.loads(record.read_text()) if record.exists() else {"stats": {}, "results": []}
    return Play(done.returncode, done.stdout + done.stderr, data["stats"], data["results"])
