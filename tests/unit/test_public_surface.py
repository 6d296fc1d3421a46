"""The public surface, stated once: the public modules' `__all__`, the table in docs/reference.md
("The public surface"), and the names below agree; and the examples users copy (the Python blocks
of README.md and docs/*.md, the files in examples/) import streamscope only through those modules.

A name leaving `__all__` (or no longer importable) fails here, as does a name in `__all__` that the
docs do not list, a doc example that imports an internal module (`streamscope.core...`), and a
private or foreign name exported by accident. Adding a name is a decision: add it to EXPECTED, to
the table in docs/reference.md and to the docs that describe it.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference.md"

EXPECTED: dict[str, list[str]] = {
    "streamscope": [
        "AnthropicInstrumentor", "Backoff", "Breaker", "Budgets", "CircuitOpen", "OpenAIInstrumentor",
        "StreamResult", "StreamTimeout", "__version__", "acollect", "astream_with_retry", "classify",
        "collect", "deadline", "route", "stream_with_retry",
    ],
    "streamscope.serve": [
        "ALLOW_HEADERS", "DeadlineMiddleware", "EXPOSE_HEADERS", "EventMap", "MemoryBuffer", "RedisBuffer",
        "RedisStore", "bad_request", "client_routes", "continuation_messages", "deadline_headers", "relay",
        "text_events", "trim_to_sentence",
    ],
    "streamscope.telemetry": ["MetricsServer", "Telemetry", "serve_metrics", "setup", "worker_exit"],
    "streamscope.simulator": [
        "BlockSpec", "Cut", "Event", "HttpError", "OpenAIHttpError", "Ping", "REFERENCE_DIR", "Raw",
        "ReasoningSpec", "RequestLog", "SCENARIOS", "Scenario", "ServerToolSpec", "Silence", "Simulator",
        "Step", "TextSpec", "ThinkingSpec", "ToolUseSpec", "chat_error", "chat_stream", "error_event",
        "from_sse_file", "message_stream", "pings", "responses_error", "responses_stream",
    ],
}
"""What each public module exports: the contract's Python API and what the docs describe."""

PUBLIC = tuple(EXPECTED)
DESCRIBED_IN = {"streamscope.simulator": ROOT / "docs" / "simulator.md"}
"""Where each module's names are described (beyond the table); docs/reference.md unless named."""
DUNDERS = {"__version__"}
"""The only dunder a public `__all__` may hold."""


def _module(name: str) -> ModuleType:
    return importlib.import_module(name)


# -- (a) every promised name is there ------------------------------------------------------------


@pytest.mark.parametrize("module_name", PUBLIC)
def test_every_promised_name_is_exported_and_importable(module_name: str) -> None:
    module = _module(module_name)
    exported = list(module.__all__)
    missing = sorted(set(EXPECTED[module_name]) - set(exported))
    assert not missing, f"{module_name}.__all__ lost {missing}"
    for name in EXPECTED[module_name]:
        namespace: dict[str, object] = {}
        exec(f"from {module_name} import {name}", namespace)  # what a user writes, lazy loading included
        assert namespace[name] is getattr(module, name)
    unexpected = sorted(set(exported) - set(EXPECTED[module_name]))
    assert not unexpected, (f"{module_name}.__all__ gained {unexpected}: a new public name is a decision; "
                            "add it to EXPECTED here and to docs/reference.md, 'The public surface'")


@pytest.mark.parametrize("module_name", PUBLIC)
def test_every_exported_name_resolves_and_is_listed_by_dir(module_name: str) -> None:
    module = _module(module_name)
    for name in module.__all__:
        assert hasattr(module, name), f"{module_name}.__all__ names {name!r}, which does not import"
    assert set(module.__all__) <= set(dir(module))


# -- (b) every exported name is documented -------------------------------------------------------


def _surface_table() -> dict[str, list[str]]:
    """docs/reference.md's "The public surface" table: module -> the names its row lists."""
    text = REFERENCE.read_text()
    found = re.search(r"^## The public surface\n(.*?)(?=^## )", text, re.S | re.M)
    assert found, "docs/reference.md has no '## The public surface' section"
    table: dict[str, list[str]] = {}
    for line in found.group(1).splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0].startswith("`streamscope"):
            continue
        module = re.match(r"`([\w.]+)`", cells[0])
        assert module, line
        table[module.group(1)] = re.findall(r"`([A-Za-z_]\w*)`", cells[1])
    return table


def test_the_reference_lists_exactly_the_public_modules() -> None:
    assert sorted(_surface_table()) == sorted(PUBLIC)


@pytest.mark.parametrize("module_name", PUBLIC)
def test_the_reference_lists_exactly_what_all_exports(module_name: str) -> None:
    listed = _surface_table()[module_name]
    exported = _module(module_name).__all__
    assert len(listed) == len(set(listed)), f"a name is listed twice for {module_name}"
    undocumented = sorted(set(exported) - set(listed))
    assert not undocumented, f"{module_name}.__all__ has names docs/reference.md does not list: {undocumented}"
    gone = sorted(set(listed) - set(exported))
    assert not gone, f"docs/reference.md lists names {module_name} does not export: {gone}"


@pytest.mark.parametrize("module_name", PUBLIC)
def test_every_exported_name_is_described(module_name: str) -> None:
    """Beyond the table: each name is written where its module is described, as code (`setup()`,
    `streamscope.serve.relay(...)`, `responses_stream(reasoning=ReasoningSpec(...))`)."""
    text = DESCRIBED_IN.get(module_name, REFERENCE).read_text()
    text = re.sub(r"^## The public surface\n.*?(?=^## )", "", text, flags=re.S | re.M)
    text = re.sub(r"^\s*```.*?^\s*```", "", text, flags=re.S | re.M)  # prose only: not the examples
    code = "\n".join(re.findall(r"`([^`]+)`", text))  # inline code, across a line break too
    missing = [name for name in _module(module_name).__all__ if not re.search(rf"\b{re.escape(name)}\b", code)]
    assert not missing, f"{module_name}: not described in {DESCRIBED_IN.get(module_name, REFERENCE).name}: {missing}"


# -- (c) the examples import only public modules -------------------------------------------------


def _python_blocks(path: Path) -> Iterator[tuple[int, str]]:
    """(line, code) of each fenced ```python block, indented ones (in a list item) included."""
    lines = path.read_text().splitlines()
    index = 0
    while index < len(lines):
        opening = re.match(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)", lines[index])
        index += 1
        if not opening:
            continue
        fence, language, start, body = opening.group(2), opening.group(3).lower(), index, []
        while index < len(lines) and not re.match(rf"^\s*{re.escape(fence)}\s*$", lines[index]):
            body.append(lines[index])
            index += 1
        index += 1
        if language in {"python", "py", "python3"}:
            yield start, textwrap.dedent("\n".join(body))


def _import_problems(tree: ast.AST) -> list[str]:
    """What in `tree` reaches streamscope other than through a public module's exported names."""
    problems: list[str] = []
    imported_root = False
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            problems.append(f"line {node.lineno}: relative import")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "streamscope":
            if node.module not in PUBLIC:
                problems.append(f"line {node.lineno}: from {node.module} import ...: not a public module")
                continue
            exported = set(_module(node.module).__all__)
            for alias in node.names:
                public_submodule = f"{node.module}.{alias.name}" in PUBLIC
                if alias.name not in exported and not public_submodule:
                    problems.append(f"line {node.lineno}: {alias.name} is not in {node.module}.__all__")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "streamscope":
                    continue
                imported_root = True
                if alias.name not in PUBLIC:
                    problems.append(f"line {node.lineno}: import {alias.name}: not a public module")
    if imported_root:  # `streamscope.core.x` reached as an attribute after `import streamscope`
        inner = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        for node in ast.walk(tree):
            dotted = None if id(node) in inner else _dotted(node)
            if dotted and dotted.startswith("streamscope.") and not _public_path(dotted):
                problems.append(f"line {node.lineno}: {dotted}: not a public module's name")
    return problems


def _dotted(node: ast.AST) -> str | None:
    """`a.b.c` for an attribute chain on a plain name (the longest chain only), else None."""
    if not isinstance(node, ast.Attribute):
        return None
    parts: list[str] = []
    current: ast.expr = node
    while isinstance(current, ast.Attribute):
        parts.append(current.attr)
        current = current.value
    if not isinstance(current, ast.Name):
        return None
    return ".".join([current.id, *reversed(parts)])


def _public_path(dotted: str) -> bool:
    """Whether `streamscope.a.b...` goes through a public module to one of its exported names (what
    comes after that name is the name's own attributes)."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = ".".join(parts[:cut])
        if module in PUBLIC:
            return parts[cut] in _module(module).__all__ or f"{module}.{parts[cut]}" in PUBLIC
    return False


def _doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_docs_python_blocks_import_only_public_modules() -> None:
    checked, unparsed, problems = 0, [], []
    for path in _doc_files():
        for line, code in _python_blocks(path):
            try:
                tree = ast.parse(code)
            except SyntaxError:  # a signature, a fragment: nothing to import
                unparsed.append(f"{path.relative_to(ROOT)}:{line}")
                continue
            checked += 1
            problems += [f"{path.relative_to(ROOT)} (the block from line {line + 1}), {problem}"
                         for problem in _import_problems(tree)]
    assert not problems, "doc examples reach internal modules:\n" + "\n".join(problems)
    # The docs hold about 25 Python blocks, nearly all of them code that parses: a check that found
    # few of them (a changed fence, a broken parser) proves nothing.
    assert checked >= 20, (checked, unparsed)
    assert len(unparsed) <= checked // 4, unparsed


def test_the_example_files_import_only_public_modules() -> None:
    files = sorted(path for path in (ROOT / "examples").rglob("*")
                   if path.is_file() and "__pycache__" not in path.parts)
    assert files, "examples/ is empty"
    problems = []
    for path in files:
        assert path.suffix == ".py", f"{path.relative_to(ROOT)}: only Python files are checked here"
        problems += [f"{path.relative_to(ROOT)}: {problem}"
                     for problem in _import_problems(ast.parse(path.read_text(), filename=str(path)))]
    assert not problems, "examples reach internal modules:\n" + "\n".join(problems)


CALLED = re.compile(r"`(streamscope(?:\.\w+)+)\(")
"""A dotted name written as a call in the docs' text (`streamscope.x.f(...)`): an invitation to call it."""


def test_the_docs_text_calls_only_public_names() -> None:
    """Prose may say where something lives (`core/failures.py`), but a call written out must be
    one a user can make: through a public module to one of its names."""
    called = [(path, match.group(1)) for path in _doc_files() for match in CALLED.finditer(path.read_text())]
    problems = [f"{path.relative_to(ROOT)}: `{name}(`" for path, name in called if not _public_path(name)]
    assert not problems, "the docs ask users to call internal functions:\n" + "\n".join(problems)
    assert CALLED.search("see `streamscope.core.classifier.missing()`") and not _public_path(
        "streamscope.core.classifier.missing"), "the check would catch one"


@pytest.mark.parametrize("code, problem", [
    ("from streamscope.core.classifier import classify", "not a public module"),
    ("import streamscope.helpers.retry", "not a public module"),
    ("from streamscope.serve import stream_relay", "not in streamscope.serve.__all__"),
    ("from streamscope import _LAZY", "not in streamscope.__all__"),
    ("import streamscope\nstreamscope.core.classifier.missing({})", "not a public module's name"),
    ("from .core import classify", "relative import"),
])
def test_the_import_check_catches_an_internal_import(code: str, problem: str) -> None:
    found = _import_problems(ast.parse(code))
    assert len(found) == 1 and problem in found[0], found


@pytest.mark.parametrize("code", [
    "from streamscope import AnthropicInstrumentor, telemetry",
    "import streamscope.telemetry\nstreamscope.telemetry.setup('x').shutdown()",
    "import streamscope\nstreamscope.Budgets(idle=1).idle\nstreamscope.serve.relay",
    "from streamscope.simulator import Simulator, responses_stream",
])
def test_the_import_check_passes_public_imports(code: str) -> None:
    assert _import_problems(ast.parse(code)) == []


# -- (d) nothing internal exported by accident ---------------------------------------------------


@pytest.mark.parametrize("module_name", PUBLIC)
def test_all_holds_no_private_or_foreign_name(module_name: str) -> None:
    module = _module(module_name)
    exported = list(module.__all__)
    assert len(exported) == len(set(exported)), f"{module_name}.__all__ repeats a name"
    private = [name for name in exported if name.startswith("_") and name not in DUNDERS]
    assert not private, f"{module_name}.__all__ exports private names: {private}"
    for name in exported:
        value = getattr(module, name)
        assert not inspect.ismodule(value), f"{module_name}.__all__ exports the module {name!r}"
        if inspect.isclass(value) or inspect.isroutine(value):
            assert value.__module__.split(".")[0] == "streamscope", (
                f"{module_name}.{name} is {value.__module__}'s, not streamscope's: re-exported by accident?")
