"""The signatures the docs write out for `streamscope.serve` are the code's: every parameter a doc
names exists, in that order, with that default, and a signature written whole (no `...`) leaves
none out. A parameter added to `relay()` and missing from docs/reference.md fails here."""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streamscope import serve

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "docs" / "reference.md", ROOT / "docs" / "serving.md", ROOT / "README.md"]
CALLABLES: dict[str, Callable[..., Any]] = {name: getattr(serve, name) for name in (
    "relay", "MemoryBuffer", "RedisBuffer", "RedisStore", "DeadlineMiddleware", "deadline_headers")}
SIGNATURE = re.compile(r"\b(" + "|".join(CALLABLES) + r")\(([^()`]*)\)", re.S)


def documented() -> Iterator[tuple[str, str, str]]:
    """(where, name, parameters) for each signature written out: one with a bare `*` in it (a call
    example passes values, a signature marks its keyword-only part)."""
    for path in DOCS:
        text = path.read_text()
        for match in SIGNATURE.finditer(text):
            params = " ".join(match.group(2).split())
            if re.search(r"(^|, )\*(,|$)", params):
                line = text.count("\n", 0, match.start()) + 1
                yield f"{path.relative_to(ROOT)}:{line}", match.group(1), params


def parsed(params: str) -> tuple[list[tuple[str, str | None, bool]], bool]:
    """([(name, default as written, keyword-only)], whole): `...` in the list means some are left out."""
    whole = "..." not in params
    source = "def f(" + re.sub(r"(^|, )\.\.\.(?=,|$)", "", params).strip(", ") + "): pass"
    args = ast.parse(source).body[0].args  # type: ignore[attr-defined]
    positional = [(a.arg, None, False) for a in args.args]
    for (name, _, kw), default in zip(positional[::-1], args.defaults[::-1], strict=False):
        positional[positional.index((name, None, kw))] = (name, ast.unparse(default), kw)
    keyword = [(a.arg, ast.unparse(d) if d is not None else None, True)
               for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)]
    return positional + keyword, whole


def real(func: Callable[..., Any]) -> list[tuple[str, object, bool]]:
    return [(p.name, p.default, p.kind is inspect.Parameter.KEYWORD_ONLY)
            for p in inspect.signature(func).parameters.values()]


SIGNATURES = list(documented())


def test_the_docs_write_out_the_serve_signatures() -> None:
    names = {name for _, name, _ in SIGNATURES}
    assert names == set(CALLABLES), f"no signature written out for {set(CALLABLES) - names}"


@pytest.mark.parametrize(("where", "name", "params"), SIGNATURES, ids=[w for w, _, _ in SIGNATURES])
def test_a_documented_signature_is_the_real_one(where: str, name: str, params: str) -> None:
    written, whole = parsed(params)
    actual = real(CALLABLES[name])
    by_name = {n: (default, kw) for n, default, kw in actual}
    for param, default, kw in written:
        assert param in by_name, f"{where}: {name}() has no parameter {param!r}"
        real_default, real_kw = by_name[param]
        assert kw == real_kw, f"{where}: {name}()'s {param!r} is {'keyword-only' if real_kw else 'positional'}"
        if default is not None:
            assert ast.literal_eval(default) == real_default, \
                f"{where}: {name}(..., {param}={default}) but the code's default is {real_default!r}"
        else:
            assert real_default is inspect.Parameter.empty, f"{where}: {name}()'s {param!r} has a default"
    order = [n for n, _, _ in actual if n in {p for p, _, _ in written}]
    assert [p for p, _, _ in written] == order, f"{where}: {name}()'s parameters are in another order"
    if whole:
        missing = [n for n, _, _ in actual if n not in {p for p, _, _ in written}]
        assert not missing, f"{where}: {name}() leaves out {missing} (write them, or `...`)"


def test_the_documented_misspelt_option_line_is_the_real_one() -> None:
    """serving.md quotes the line a misspelt `relay()` option raises: it is that line, word for word."""
    text = " ".join((ROOT / "docs" / "serving.md").read_text().split())
    [quoted] = re.findall(r"`(relay\(\) got an unexpected keyword argument [^`]*)`", text)
    with pytest.raises(TypeError) as raised:
        asyncio.run(serve.relay(None, lambda: None, heartbeet=5))  # type: ignore[arg-type,call-arg]
    assert quoted == str(raised.value)


def test_the_check_sees_a_missing_parameter() -> None:
    written, whole = parsed("request, open_stream, *, heartbeat=15.0")
    assert whole and [p for p, _, _ in written] == ["request", "open_stream", "heartbeat"]
    assert {n for n, _, _ in real(serve.relay)} - {p for p, _, _ in written}, "relay() has more than these"
    written, whole = parsed("url_or_client, *, ..., timeout=0.5")
    assert not whole and written == [("url_or_client", None, False), ("timeout", "0.5", True)]
