"""The three client budgets, and where each call's budgets come from.

A call's budgets resolve field by field from the most specific entry that sets the field:
`route:<name>`, then the longest matching `model:<glob>`, then `default`. `None` means
"not set here, inherit"; `math.inf` switches a budget off explicitly. A budget nothing sets
is not enforced. `first_content` says which event ends the first-token wait.
"""

from __future__ import annotations

import fnmatch
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields

from streamscope.core.keywords import checked_class
from streamscope.core.record import CallBudgets, FirstContent

from .config_file import CONFIG_ENV, BudgetFile, BudgetFileError, Fields, read_budget_file
from .keys import split_keys

__all__ = ["CONFIG_ENV", "BudgetFileError", "BudgetTable", "Budgets", "CallBudgets", "FirstContent"]

_NUMERIC = ("first_token", "idle", "deadline")
_FIELD_NAMES = (*_NUMERIC, "first_content")


@checked_class
@dataclass(frozen=True, slots=True)
class Budgets:
    """Client budgets in seconds. `None` = inherit / not set; `math.inf` = explicitly off.

    A keyword it does not take (`Budgets(idel=5)`) raises a one-line `TypeError` naming the field
    probably meant and every field: a misspelt budget must not pass as a budget not set."""

    first_token: float | None = None
    idle: float | None = None
    deadline: float | None = None
    first_content: FirstContent | None = None

    def __post_init__(self) -> None:
        for name in _NUMERIC:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"Budgets.{name} must be a number of seconds or None, not {value!r}")
            if math.isnan(value) or value <= 0:
                raise ValueError(f"Budgets.{name} must be > 0 (math.inf switches it off), not {value!r}")
            object.__setattr__(self, name, float(value))
        if self.first_content not in (None, "text", "any"):
            raise ValueError(f'Budgets.first_content must be "text" or "any", not {self.first_content!r}')

    def over(self, less_specific: Budgets) -> Budgets:
        """These budgets, with each unset field taken from `less_specific`."""
        return Budgets(**{
            f.name: getattr(less_specific, f.name) if getattr(self, f.name) is None else getattr(self, f.name)
            for f in fields(self)
        })


def _finite(value: float | None) -> float | None:
    return None if value is None or math.isinf(value) else value


class BudgetTable:
    """Budgets by route and model pattern, resolved per call (and cached per model and route)."""

    def __init__(
        self,
        default: Budgets | None = None,
        routes: Mapping[str, Budgets] | None = None,
        models: Mapping[str, Budgets] | None = None,
    ) -> None:
        self.default = default or Budgets()
        self.routes = dict(routes or {})
        # Longest pattern first: where several match, the longest wins.
        self.models = sorted((models or {}).items(), key=lambda item: -len(item[0]))
        self._cache: dict[tuple[str | None, str | None], CallBudgets] = {}

    @classmethod
    def from_config(cls, config: Budgets | Mapping[str, Budgets] | BudgetTable | None) -> BudgetTable:
        """From `instrument(budgets=...)`: one `Budgets`, or keys `default`, `route:<name>`, `model:<glob>`."""
        if config is None:
            return cls()
        if isinstance(config, BudgetTable):
            return config
        if isinstance(config, Budgets):
            return cls(default=config)
        if not isinstance(config, Mapping):
            raise TypeError(
                f"instrument(budgets=...) takes a streamscope.Budgets or a mapping with keys \"default\", "
                f"\"route:<name>\", \"model:<glob>\", not {type(config).__name__}"
                + (" (for a TOML file: BudgetTable.from_toml(path), or STREAMSCOPE_CONFIG with no budgets=)"
                   if isinstance(config, (str, os.PathLike)) else "")
            )
        def check(key: str, value: object) -> Budgets:
            if not isinstance(value, Budgets):
                hint = (f"; {key} is a field of Budgets: budgets=Budgets({key}=...) or "
                        f"{{\"default\": Budgets({key}=...)}}" if key in _FIELD_NAMES else "")
                raise TypeError(f"instrument(budgets=...): budgets[{key!r}] must be a streamscope.Budgets, "
                                f"not {type(value).__name__}{hint}")
            return value

        default, routes, models = split_keys(config, "budgets", check)
        return cls(default, routes, models)

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str]) -> BudgetTable:
        """Tables `[budgets.default]`, `[budgets.routes.<name>]`, `[budgets.models."<glob>"]`.

        Raises `BudgetFileError` (a `ValueError`) naming the file and every problem in it: an
        unreadable file, a TOML syntax error, any table or key outside that layout, a bad value."""
        return cls._from_file(read_budget_file(path))

    @classmethod
    def from_environment(cls) -> BudgetTable:
        """The TOML file named by `STREAMSCOPE_CONFIG`, or no budgets at all (unset or empty).

        Raises `BudgetFileError`, whose message also names `STREAMSCOPE_CONFIG`."""
        path = os.environ.get(CONFIG_ENV)
        return cls._from_file(read_budget_file(path, env=CONFIG_ENV)) if path else cls()

    @classmethod
    def _from_file(cls, file: BudgetFile) -> BudgetTable:
        return cls(
            _checked(file.default),
            {name: _checked(table) for name, table in file.routes.items()},
            {glob: _checked(table) for glob, table in file.models.items()},
        )

    def resolve(self, model: str | None, route: str | None) -> CallBudgets:
        """The budgets for a call to `model` on `route` (cached: the table is immutable)."""
        key = (model, route)
        found = self._cache.get(key)
        if found is None:
            merged = self.default
            for pattern, budgets in reversed(self.models):  # shortest first, so the longest ends on top
                if model is not None and fnmatch.fnmatchcase(model, pattern):
                    merged = budgets.over(merged)
            if route is not None and route in self.routes:
                merged = self.routes[route].over(merged)
            found = CallBudgets(
                _finite(merged.first_token), _finite(merged.idle), _finite(merged.deadline),
                merged.first_content or "text",
            )
            if len(self._cache) < 4096:
                self._cache[key] = found
        return found


def _checked(fields: Fields) -> Budgets:
    # read_budget_file checked every key (a field of Budgets) and every value (seconds, or "text" /
    # "any" for first_content); its loose `Fields` type cannot say which value goes with which key.
    return Budgets(**fields)  # type: ignore[arg-type]
