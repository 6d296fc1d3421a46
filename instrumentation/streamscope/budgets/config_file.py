"""Reading the budget file (`STREAMSCOPE_CONFIG`): strict, with every problem in one message.

A budget file read wrong fails open: budgets quietly off is the very failure streamscope exists
to catch. So every table and key is checked against the one valid layout, a misspelling is met
with the spelling it was probably meant to be, and all the problems of a file are reported at
once (one edit fixes them, not one restart per problem). This module only reads and checks; it
returns plain values, and `BudgetTable.from_toml` builds the budgets from them.

Besides the budget tables the file has two more: `[logs]`, whose one key `streams` (true or false)
switches the plain instrumentation's stream log records on (`instrument(stream_logs=...)`), and
`[breaker]` (the circuit breaker's tables), which `breaker/circuit.py` reads and checks on its own,
and `[prices."<glob>"]` (the user's prices), which `pricing/prices.py` checks.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

CONFIG_ENV = "STREAMSCOPE_CONFIG"
NUMERIC = ("first_token", "idle", "deadline")
FIELDS = (*NUMERIC, "first_content")
SECTIONS = ("default", "routes", "models")
LOGS = ("streams",)
OFF = ("inf", "off")
FIRST_CONTENT = ("text", "any")

_TABLES = '[budgets.default], [budgets.routes.<name>] and [budgets.models."<glob>"]'
_FIELDS_TEXT = "first_token, idle, deadline, first_content"
_LOGS_TEXT = "[logs] has one key, streams = true or false (one log record per streamed call)"
_NUMBER_TEXT = 'a number of seconds > 0, or "off" (or "inf") to switch it off'
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_SECONDS_TEXT = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(?:s|sec|secs|second|seconds)?\s*")
_AT_LINE = re.compile(r"at line (\d+), column (\d+)")

Fields = dict[str, float | str]
"""One budget table's fields, checked: numbers (math.inf = off) and `first_content`."""


class BudgetFile(NamedTuple):
    """A budget file's tables, checked: `default`, routes by name, models by glob; and `[logs]`."""

    default: Fields
    routes: dict[str, Fields]
    models: dict[str, Fields]
    logs: dict[str, bool]
    """`[logs]`: `streams` if the file sets it."""


class BudgetFileError(ValueError):
    """The budget file cannot be used. The message names the file and every problem found."""

    def __init__(self, path: str, problems: Sequence[str], env: str | None = None) -> None:
        self.path = path
        self.problems = tuple(problems)
        self.env = env
        where = f"budget file {path}" + (f" ({env})" if env else "")
        if len(self.problems) == 1:
            message = f"{where}: {self.problems[0]}"
        else:
            numbered = "; ".join(f"({n}) {p}" for n, p in enumerate(self.problems, 1))
            message = f"{where} has {len(self.problems)} problems: {numbered}"
        super().__init__(message)


def read_budget_file(path: str | os.PathLike[str], env: str | None = None) -> BudgetFile:
    """The checked tables of the TOML file at `path`; `env` names the variable that named it.

    Raises `BudgetFileError` for a file that cannot be read or parsed, and for every table, key
    and value outside the layout (all of them in one error)."""
    shown = os.fspath(path)
    data = _parse(shown, env)
    problems: list[str] = []
    checked = _check(data, problems)
    if problems:
        raise BudgetFileError(shown, problems, env)
    return checked


# -- reading ---------------------------------------------------------------------------------------


def read_toml(path: str | os.PathLike[str], env: str | None = None) -> dict[str, Any]:
    """The parsed TOML of the file at `path`, unchecked (the breaker's tables are read from it).
    Raises `BudgetFileError` for a file that cannot be read or parsed."""
    return _parse(os.fspath(path), env)


def _parse(path: str, env: str | None) -> dict[str, Any]:
    def fail(problem: str) -> BudgetFileError:
        return BudgetFileError(path, [problem], env)

    fix = (f"set {env} to the path of a TOML budget file, or unset it to run without budgets"
           if env else "give the path of a TOML budget file")
    if os.path.isdir(path):
        raise fail(f"this is a directory, not a TOML file; {fix}")
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        relative = "" if os.path.isabs(path) else f" (relative to the working directory {os.getcwd()})"
        raise fail(f"no such file{relative}; {fix}") from None
    except OSError as exc:
        raise fail(f"cannot be read ({exc.strerror or exc}); {fix}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise fail(f"not UTF-8 text (byte {exc.start}): a budget file is TOML text") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise fail(f"not valid TOML: {_syntax(exc, text)}") from None


def _syntax(exc: tomllib.TOMLDecodeError, text: str) -> str:
    """tomllib's message (it ends with the line and column), and the line it points at."""
    message = str(exc)
    found = _AT_LINE.search(message)
    if found is None:
        return message
    lines = text.splitlines()
    number = int(found.group(1))
    if 1 <= number <= len(lines) and lines[number - 1].strip():
        line = lines[number - 1].strip()
        return f"{message}; line {number} reads: {line[:80]}{'...' if len(line) > 80 else ''}"
    return message


# -- checking --------------------------------------------------------------------------------------


def _check(data: Mapping[str, Any], problems: list[str]) -> BudgetFile:
    result = BudgetFile({}, {}, {}, {})
    for key, value in data.items():
        if key == "logs":
            result.logs.update(_logs(value, problems))
        elif key not in ("budgets", "breaker", "prices"):  # [breaker], [prices]: checked where they are read
            problems.append(_unknown_top(key, value))
    budgets = data.get("budgets", {})
    if not isinstance(budgets, dict):
        problems.append(f"budgets = {_show(budgets)}: budgets is a table of tables, {_TABLES}")
        return result
    for key, value in budgets.items():
        if key == "default":
            if isinstance(value, dict):
                result.default.update(_fields(value, "[budgets.default]", problems))
            else:
                problems.append(f"[budgets] default = {_show(value)}: [budgets.default] is a table of budget "
                                f"fields ({_FIELDS_TEXT})")
        elif key in ("routes", "models"):
            _named(key, value, getattr(result, key), problems)
        else:
            problems.append(_unknown_in_budgets(key, value))
    return result


def _named(section: str, tables: Any, out: dict[str, Fields], problems: list[str]) -> None:
    """`[budgets.routes.<name>]` or `[budgets.models."<glob>"]`: each entry a table of fields."""
    generic = "[budgets.routes.<name>]" if section == "routes" else '[budgets.models."<glob>"]'
    if not isinstance(tables, dict):
        problems.append(f"[budgets] {section} = {_show(tables)}: each entry is a table of its own, {generic}")
        return
    for name, table in tables.items():
        header = f"[budgets.{section}.{_key(name)}]"
        if isinstance(table, dict):
            out[name] = _fields(table, header, problems)
        elif name in FIELDS:
            problems.append(f"[budgets.{section}] {name}: budget fields go in a table of their own, {generic} "
                            f"(for every call: [budgets.default])")
        else:
            problems.append(f"[budgets.{section}] {_key(name)} = {_show(table)}: each entry is a table of budget "
                            f"fields, {header}")


def _logs(table: Any, problems: list[str]) -> dict[str, bool]:
    """`[logs]`: its one key, `streams`, a TOML boolean."""
    if not isinstance(table, dict):
        problems.append(f"logs = {_show(table)}: logs is a table; write [logs] and under it streams = true")
        return {}
    out: dict[str, bool] = {}
    for key, value in table.items():
        if key in LOGS and isinstance(value, bool):
            out[key] = value
        elif key in LOGS:
            word = value.strip().lower() if isinstance(value, str) else None
            hint = f" (write it without quotes: {key} = {word})" if word in ("true", "false") else ""
            problems.append(f"[logs] {key} = {_show(value)}: must be true or false{hint}")
        else:
            close = _close(key, LOGS)
            what = "table" if isinstance(value, dict) else "key"
            problems.append(f"[logs] {_key(key)}: unknown {what}; "
                            + _then(f"did you mean {close}?" if close else None, _LOGS_TEXT))
    return out


def _fields(table: Mapping[str, Any], header: str, problems: list[str]) -> Fields:
    """One budget table's fields, each checked; problems are added to `problems`."""
    out: Fields = {}
    for key, value in table.items():
        if key in NUMERIC:
            number = _seconds(value)
            if number is None:
                problems.append(f"{header} {key} = {_show(value)}: must be {_NUMBER_TEXT}{_value_hint(key, value)}")
            else:
                out[key] = number
        elif key == "first_content":
            if value in FIRST_CONTENT and isinstance(value, str):
                out[key] = value
            else:
                close = _close(value, FIRST_CONTENT) if isinstance(value, str) else None
                hint = f' (did you mean "{close}"?)' if close else ""
                problems.append(f'{header} first_content = {_show(value)}: must be "text" or "any"{hint}')
        elif isinstance(value, dict) and key in ("routes", "models", "default"):
            problems.append(f"{header}: [{header[1:-1]}.{key}] is not a budget table; {key} belongs directly "
                            f"under [budgets]: {_section_headers(key, value)}")
        else:
            close = _close(key, FIELDS)
            what = "table" if isinstance(value, dict) else "key"
            hint = _then(f"did you mean {close}?" if close else None, f"the budget fields are {_FIELDS_TEXT}")
            problems.append(f"{header} {_key(key)}: unknown {what}; {hint}")
    return out


def _seconds(value: Any) -> float | None:
    """A valid number of seconds (math.inf for "off"), or None."""
    if isinstance(value, str):
        return math.inf if value in OFF else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if math.isnan(value) or value <= 0:
        return None
    return float(value)


def _value_hint(key: str, value: Any) -> str:
    if isinstance(value, str):
        if value.strip().lower() in OFF:
            return f' (did you mean "{value.strip().lower()}"?)'
        found = _SECONDS_TEXT.fullmatch(value)
        if found:
            return f" (write the number without quotes: {key} = {found.group(1)})"
        return ""
    if isinstance(value, bool):
        return ""
    if isinstance(value, (int, float)) and not math.isnan(value) and value <= 0:
        return " (to inherit it instead, leave the key out)"
    return ""


# -- suggestions -----------------------------------------------------------------------------------


def _unknown_top(key: str, value: Any) -> str:
    if key in FIELDS:
        return (f"top-level key {key}: budget fields go in a budget table, not at the top of the file: "
                f"[budgets.default] for every call (or [budgets.routes.<name>], [budgets.models.\"<glob>\"])")
    if key in LOGS and not isinstance(value, dict):
        return f"top-level key {key}: it goes in the [logs] table: [logs] then, on the next line, {key} = true"
    shown = _written("", key, value)
    meant = _meant(key, value)
    if meant is None and _close(key, ("budgets",)):
        meant = "[budgets" + (f".{_first_table(value)}]" if _first_table(value) else "]")
    if meant is None and _close(key, ("logs", *LOGS)):
        meant = "[logs]"
    return f"unknown {shown}; " + _then(f"did you mean {meant}?" if meant else None,
                                        f"the file holds only the budget tables {_TABLES}, [logs], "
                                        f"the [breaker] tables and the [prices.\"<glob>\"] tables")


def _unknown_in_budgets(key: str, value: Any) -> str:
    shown = _written("budgets", key, value)
    if key in FIELDS and not isinstance(value, dict):
        return (f"[budgets] {key}: budget fields go in a budget table, not directly in [budgets]: "
                f"[budgets.default] for every call (or [budgets.routes.<name>], [budgets.models.\"<glob>\"])")
    meant = _meant(key, value)
    if meant is not None:
        api = (" (\"model:<glob>\" and \"route:<name>\" are the keys of instrument(budgets=...), not of the file)"
               if ":" in key else "")
        return f"unknown {shown}; did you mean {meant}?{api} The budget tables are {_TABLES}"
    field = _close(key, FIELDS)
    if field is not None and not isinstance(value, dict):
        return (f"[budgets] {_key(key)}: unknown key; did you mean {field}? Budget fields go in [budgets.default] "
                f"(or [budgets.routes.<name>], [budgets.models.\"<glob>\"]), not directly in [budgets]")
    return f"unknown {shown}; the budget tables are {_TABLES}"


def _meant(key: str, value: Any) -> str | None:
    """The table header `key` (with `value`) was probably meant as, where there is one."""
    prefixed = re.fullmatch(r"\s*(\w+)\s*:\s*(.+)", key)
    if prefixed:  # the Python API's "model:<glob>" / "route:<name>" keys
        section = _section(prefixed.group(1))
        if section in ("routes", "models"):
            return f"[budgets.{section}.{_key(prefixed.group(2).strip())}]"
    section = _section(key)
    if section is None:
        return None
    if section == "default":
        return "[budgets.default]"
    return _section_headers(section, value)


def _section_headers(section: str, value: Any) -> str:
    """`[budgets.models."a"]` for each table in `value`, or the generic header."""
    names = [name for name, table in value.items() if isinstance(table, dict)] if isinstance(value, dict) else []
    if section == "default":
        return "[budgets.default]"
    if not names:
        return "[budgets.routes.<name>]" if section == "routes" else '[budgets.models."<glob>"]'
    return ", ".join(f"[budgets.{section}.{_key(name)}]" for name in names)


def _section(key: str) -> str | None:
    """'default', 'routes' or 'models' for `key` if it is a misspelling of one (or the singular)."""
    lowered = key.strip().lower()
    singular = {"route": "routes", "model": "models", "defaults": "default"}
    if lowered in singular:
        return singular[lowered]
    return _close(lowered, SECTIONS)


def _written(parent: str, key: str, value: Any) -> str:
    """How the user wrote `key` under `parent`: the table header(s), or the key."""
    prefix = f"{parent}." if parent else ""
    if isinstance(value, dict):
        subtables = [name for name, table in value.items() if isinstance(table, dict)]
        if subtables and len(subtables) == len(value):
            headers = ", ".join(f"[{prefix}{_key(key)}.{_key(name)}]" for name in subtables)
            return f"table{'s' if len(subtables) > 1 else ''} {headers}"
        return f"table [{prefix}{_key(key)}]"
    return f"key {_key(key)} in [{parent}]" if parent else f"top-level key {_key(key)}"


def _first_table(value: Any) -> str | None:
    if isinstance(value, dict):
        for name, table in value.items():
            if isinstance(table, dict):
                return _key(name)
    return None


def _then(hint: str | None, rest: str) -> str:
    """`rest` after an optional question, as a new sentence."""
    return f"{hint} {rest[0].upper()}{rest[1:]}" if hint else rest


def _close(word: str, choices: Sequence[str]) -> str | None:
    found = difflib.get_close_matches(word.lower(), choices, n=1, cutoff=0.6)
    return found[0] if found else None


def _key(name: str) -> str:
    """A TOML key as written in a header: bare if it can be, else quoted."""
    if _BARE_KEY.fullmatch(name):
        return name
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _show(value: Any) -> str:
    """A value as TOML writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return str(value)
