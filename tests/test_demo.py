"""`streamscope demo` (what `make demo` runs): every scripted request gets its class."""

from __future__ import annotations

from streamscope import demo
from streamscope.cli import main


def test_demo_gives_every_class_label_as_scripted(capsys) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    for request in demo.FIRST_DEMO:
        assert request.expect in out
    assert "every class as scripted" in out
    labels = {r.expect for r in demo.FIRST_DEMO}
    from streamscope.classify import LABELS

    assert labels == set(LABELS)
