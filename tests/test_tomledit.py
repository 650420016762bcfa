"""configure.tomledit: a key we add keeps the file's comments with the sections they introduce."""

from __future__ import annotations

import pytest

from configure import tomledit


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (  # the comment introduces a sub-table of the table we add to
            "[a]\nk = 1\n\n# about a.x\n[a.x]\ny = 2\n",
            "[a]\nk = 1\nnew = true\n\n# about a.x\n[a.x]\ny = 2\n",
        ),
        (  # the comment ends the table's body and introduces the next top-level table
            "[a]\nk = 1\n\n# about b\n[b]\ny = 2\n",
            "[a]\nk = 1\nnew = true\n\n# about b\n[b]\ny = 2\n",
        ),
    ],
    ids=["sub-table", "sibling-table"],
)
def test_an_added_key_goes_above_the_comment_that_introduces_the_next_table(
    source: str, expected: str
) -> None:
    doc = tomledit.parse_text(source, "config.toml")
    tomledit.merge(doc, {"a": {"new": True}}, path="config.toml")
    assert tomledit.render(doc).decode() == expected
    # tomlkit still finds every key where it now is: a second edit changes the value in place.
    tomledit.merge(doc, {"a": {"new": False, "k": 3}}, path="config.toml")
    assert tomledit.render(doc).decode() == expected.replace("new = true", "new = false").replace(
        "k = 1", "k = 3"
    )
    assert doc.unwrap()["a"]["new"] is False and doc.unwrap()["a"].get("x", {}).get("y", 2) == 2
