"""The three client budgets: the table and its sources, their enforcement, the deadline arithmetic.

`table` resolves a call's budgets (by route and model; from code or the budget file, `config_file`);
`enforcement` decides, from the recorder's clocks, whether a budget expired; `sync_watch` (one
watchdog thread per process) and `async_watch` (a loop timer per stream) interrupt a read that
waited too long; `feasibility` says whether a thinking budget fits inside a deadline. Budgets read the
core's clocks and never write a span or a metric.
"""

from .table import CONFIG_ENV, BudgetFileError, Budgets, BudgetTable, CallBudgets

__all__ = ["CONFIG_ENV", "BudgetFileError", "BudgetTable", "Budgets", "CallBudgets"]
