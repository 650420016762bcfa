"""The node side's command line: the root app (:mod:`installer.cli.root`) and its command groups.

``node`` (install, status, revert, …), ``bundle`` (inspect, verify) and ``oci`` (push, pull) each add their
commands to the app :mod:`installer.cli.root` makes; they are imported only when the app is built.
"""
