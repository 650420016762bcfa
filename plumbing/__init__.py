"""The mechanisms every role shares: errors and exit codes, the process runner, atomic files and
contained paths, output, gpg verification, the apt/rpm architecture table and the product version.

The bottom of the dependency chain (``plumbing`` <- ``configure`` <- ``installer`` <- ``mirror``):
it imports nothing of ours and runs on the node's own python3 >= 3.9 from the bundle's zipapp.
"""
