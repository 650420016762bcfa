"""How ``make test`` splits the suite between its workers (``tests/conftest.py``): units and order."""

from __future__ import annotations

import inspect

import tests.test_fleet_ansible as fleet
from tests.conftest import SECONDS, UNITS, unit_of

MODULE = "tests/test_fleet_ansible.py"


def test_the_fleet_tests_that_share_the_mirror_rollout_are_one_unit_and_no_other_test_is_in_it() -> None:
    # The unit is found by name prefix: a test renamed out of it (or into it) would build the costly
    # mirror_rollout fixture on the other worker too, or drag a test along.
    tests = {n: f for n, f in vars(fleet).items() if n.startswith("test_") and inspect.isfunction(f)}
    sharing = {n for n, f in tests.items() if "mirror_rollout" in inspect.signature(f).parameters}
    assert sharing, "no test uses mirror_rollout any more: drop its entry from tests/conftest.py UNITS"
    units = {n: unit_of(f"{MODULE}::{n}")[0] for n in tests}
    assert {n for n, u in units.items() if u == f"{MODULE}::mirror_rollout"} == sharing
    assert {u for n, u in units.items() if n not in sharing} == {MODULE}


def test_a_file_is_one_unit_unless_listed_and_each_listed_unit_has_a_figure() -> None:
    assert (
        unit_of("tests/live/test_systemd_node.py::test_x[install]")
        == ("tests/live/test_systemd_node.py",) * 2
    )
    each = "tests/test_fleet_ansible_transports.py::test_http_transport_x"
    assert unit_of(each) == (each, "tests/test_fleet_ansible_transports.py::")  # a unit of its own
    for prefix, unit in UNITS.items():
        assert (unit or prefix) in SECONDS, prefix
