"""A big config costs in proportion to its size (#24.17), and what makes that so changes no byte of it.

Three shapes made tomlkit slow: tables split across the file with indented headers (each later
part indented once more: the output grew quadratically and was wrong), indented headers in
general (quadratic rendering), and long runs of comments. :mod:`configure.tomledit` handles all
three; these tests hold both the bytes and the growth.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from configure import tomledit
from configure.commands import configure_engine
from configure.engine import RuntimeOptions
from tests.containerd_helpers import CONFIG, FIXTURES, engine, make_root

BASE = (FIXTURES / "config-1.6-default.toml").read_text()
#: a registry mirror appended at the end: out of order (its parent is defined earlier) and indented
MIRROR = (
    '\n  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."registry-{i}.example.com"]\n'
    '    endpoint = ["https://mirror-{i}.example.com"]\n'
    "  # mirror {i}: the site's own copy\n"
    "  # (kept in sync nightly)\n"
)


def big_config(mirrors: int) -> str:
    """The default containerd config with ``mirrors`` split-off, indented, commented mirror tables."""
    return BASE + "".join(MIRROR.format(i=i) for i in range(mirrors))


def test_a_table_split_across_the_file_renders_to_its_own_bytes_and_an_edit_keeps_every_line() -> None:
    text = big_config(30)
    doc = tomledit.parse(Path("config.toml"), text.encode())
    assert tomledit.render(doc) == text.encode()  # tomlkit alone indents each later mirror once more
    tomledit.merge(
        doc,
        {
            "plugins": {
                "io.containerd.grpc.v1.cri": {"containerd": {"runtimes": {"nvidia": {"runtime_type": "x"}}}}
            }
        },
        path="config.toml",
    )
    edited = tomledit.render(doc).decode()
    lines = edited.splitlines()
    assert [line for line in lines if line in text.splitlines()] == text.splitlines()  # all there, in order
    assert len(edited) < len(text) + 200  # only the runtime was added


def test_comment_runs_come_back_verbatim_and_an_edit_gives_the_bytes_it_gives_unfolded() -> None:
    text = (
        "# top\n# of the file\nversion = 2\n\n"
        "[plugins]\n"
        '  [plugins."io.containerd.grpc.v1.cri"]\n'
        "    # the sandbox\n    # image\n"
        '    sandbox_image = "pause"\n'
        "    list = [\n      # one\n      # two\n      1,\n    ]\n"
        "# introduces the next section\n# (two lines)\n"
        '  [plugins."io.containerd.other"]\n    a = 1\n'
    )
    wanted = {"plugins": {"io.containerd.grpc.v1.cri": {"containerd": {"runtimes": {"nvidia": {"a": 1}}}}}}
    doc = tomledit.parse(Path("config.toml"), text.encode())
    assert tomledit.render(doc) == text.encode()
    tomledit.merge(doc, wanted, path="config.toml")
    edited = tomledit.render(doc)
    # The same edit on the document tomlkit parsed unfolded gives the very same bytes.
    unfolded = tomledit.parse_text(text, "config.toml")
    tomledit.merge(unfolded, wanted, path="config.toml")
    assert edited == tomledit.render(unfolded)
    assert b"# gpu-airgap-fold" not in edited
    for run in (
        b"# top\n# of the file\n",
        b"    # the sandbox\n    # image\n",
        b"      # one\n      # two\n",
    ):
        assert run in edited
    assert tomledit.load("config.toml", edited)["plugins"]["io.containerd.grpc.v1.cri"]["list"] == [1]


def test_lines_starting_with_a_hash_inside_a_multi_line_string_stay_string_text() -> None:
    text = 'a = """\n# not a comment\n# either\n"""\n# a comment\n# another\nb = 1\n'
    doc = tomledit.parse(Path("x.toml"), text.encode())
    assert tomledit.render(doc) == text.encode()
    assert tomledit.load("x.toml", text.encode()) == {"a": "# not a comment\n# either\n", "b": 1}
    assert doc.unwrap() == tomledit.load("x.toml", text.encode())


def test_load_refuses_what_parse_refuses_naming_the_file() -> None:
    with pytest.raises(Exception, match=r"x\.toml: is not UTF-8 text"):
        tomledit.load("x.toml", b"# \xff\n# comment\na = 1\n")
    with pytest.raises(Exception, match=r"x\.toml: is not valid TOML"):
        tomledit.load("x.toml", b"# c\n# d\na = \n")


@pytest.mark.slow
def test_configure_time_grows_linearly_with_the_size_of_config_toml(tmp_path: Path) -> None:
    def cpu_seconds(mirrors: int) -> float:
        root = tmp_path / str(mirrors)
        make_root(root, text=big_config(mirrors))
        started = time.process_time()  # this process only: other load on the machine does not count
        result = configure_engine(engine(), RuntimeOptions(root=root))
        spent = time.process_time() - started
        assert result.written == [root / CONFIG]
        return spent

    cpu_seconds(20)  # warm up imports and caches
    small, large = cpu_seconds(100), cpu_seconds(1000)
    # Linear: about 10 times. Quadratic (before #24.17) was hundreds of times, and minutes.
    assert large / small < 30, (small, large)
