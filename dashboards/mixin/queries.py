"""PromQL: building blocks, and the shared expressions that rules and panels both instantiate.

Why one function per quantity: the on-call engineer reads on the dashboard the same ratio the
alert fired on. Each shared quantity (class share, partial-failure ratio, budget firings per
request, ...) is a function of (window, label matchers, grouping). The recording rules call it
over the config's windows with the config's selector; the panels over ``$__rate_interval`` with
the selector and the dashboard's ``$provider``/``$model``/``$route`` filters.
"""

from __future__ import annotations

from collections.abc import Sequence

from .config import Config
from .names import (
    ATTEMPTS,
    BUDGET,
    CLASS,
    COST,
    DURATION,
    ERROR_TYPE,
    FAILURE_CODE,
    FIRINGS,
    LE,
    MODEL,
    PARTIAL,
    PROVIDER,
    REQUESTS,
    RESUME_OUTCOME_LABEL,
    RESUMES,
    RETRIES,
    ROUTE,
    STORE_ERRORS,
    UNREACHABLE,
    WASTED,
)

#: The "model" aggregation level of the recording rules: the key budgets are configured by
#: (``[budgets.models."<glob>"]`` and ``[budgets.routes.<name>]``). The route label is absent on
#: series without a route; ``sum by`` then simply yields series without it.
MODEL_LEVEL: tuple[str, ...] = (PROVIDER, MODEL, ROUTE)
#: Grouping for "per model" panels; routes are filtered with ``$route`` instead.
PER_MODEL: tuple[str, ...] = (MODEL,)
#: Grouping for budget panels: a budget is set per model and per route.
PER_BUDGET_KEY: tuple[str, ...] = (MODEL, ROUTE)
#: Grouping for spend panels: a price is per provider and model.
PER_PRICE: tuple[str, ...] = (PROVIDER, MODEL)

#: The dashboard's filters. ``=~`` with the All value ``.*`` also matches an absent label, which
#: is what makes the route (only present when a route was set) filterable.
DASHBOARD_VARIABLES: tuple[str, ...] = (
    f'{PROVIDER}=~"$provider"',
    f'{MODEL}=~"$model"',
    f'{ROUTE}=~"$route"',
)
RATE_INTERVAL = "$__rate_interval"


def dashboard_filter(cfg: Config) -> tuple[str, ...]:
    """What every panel query matches: the configured selector, then the dashboard variables."""
    return (*cfg.matchers, *DASHBOARD_VARIABLES)


# -- Building blocks ---------------------------------------------------------------------------


def vector(metric: str, matchers: Sequence[str], *extra: str) -> str:
    """A vector selector; ``metric{}`` is avoided so the text reads like hand-written PromQL."""
    all_matchers = [*matchers, *extra]
    return f"{metric}{{{','.join(all_matchers)}}}" if all_matchers else metric


def aggregate(by: Sequence[str], inner: str, op: str = "sum") -> str:
    """``op by (...) (inner)``, or a plain ``op(inner)`` when there is nothing to group by."""
    return f"{op} by ({', '.join(by)}) ({inner})" if by else f"{op}({inner})"


Metric = str | tuple[str, ...]
"""A metric name, or the same quantity under several names (the GenAI metrics' two sets,
``names.Either``): selected with ``or``."""


def sample(metric: Metric, suffix: str) -> Metric:
    """``metric`` + ``suffix`` (``_bucket``, ``_sum``, ``_count``), for each of its names."""
    return metric + suffix if isinstance(metric, str) else tuple(m + suffix for m in metric)


def rate(metric: Metric, window: str, matchers: Sequence[str], *extra: str) -> str:
    """``rate(metric{...}[window])``; for a metric under several names, ``(rate(a{...}[window]) or
    rate(b{...}[window]))``: whichever set a process emits answers, and where a series exists
    under both names (a process restarted with the other setting, within the window), the first
    one, so nothing is counted twice. (A ``{__name__=~"a|b"}`` selector would fail there instead:
    ``rate`` drops the name, and two series would be left with the same labels.)"""
    if isinstance(metric, str):
        return f"rate({vector(metric, matchers, *extra)}[{window}])"
    return "(" + " or ".join(rate(m, window, matchers, *extra) for m in metric) + ")"


def quantile(q: float, histogram: Metric, window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """The q-quantile of a classic Prometheus histogram, per ``by``."""
    inner = aggregate((*by, LE), rate(sample(histogram, "_bucket"), window, matchers))
    return f"histogram_quantile({q}, {inner})"


def mean(histogram: Metric, window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """The mean of a histogram's observations: rate of ``_sum`` over rate of ``_count``."""
    return (
        f"{aggregate(by, rate(sample(histogram, '_sum'), window, matchers))}\n/\n"
        f"{aggregate(by, rate(sample(histogram, '_count'), window, matchers))}"
    )


# -- Shared expressions: instantiated by the recording rules and by the panels -----------------


def requests_rate(window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """Requests per second, every class."""
    return aggregate(by, rate(REQUESTS, window, matchers))


def class_rate(window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """Requests per second per failure class."""
    return aggregate((*by, CLASS), rate(REQUESTS, window, matchers))


def class_ratio(window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """Each class's share of requests (0..1); the classes of one group add up to 1."""
    return (
        f"{class_rate(window, matchers, by)}\n"
        f"/ ignoring ({CLASS}) group_left\n"
        f"{requests_rate(window, matchers, by)}"
    )


def logical_requests_rate(window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """Logical requests per second: calls minus the retries the retry helpers and the relay made.

    Every attempt of a retried request is a call of its own on ``streamscope_requests_total``;
    each retry adds one call, so calls - retries counts each logical request once. ``or 0 *
    calls`` keeps a service that never retries (no retries series at all) from losing the whole
    expression to the missing operand.
    """
    calls = requests_rate(window, matchers, by)
    retries = aggregate(by, rate(RETRIES, window, matchers))
    return f"(\n  {calls}\n  -\n  (\n    {retries}\n    or 0 * {calls}\n  )\n)"


def partial_ratio(window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """Share of logical requests that failed after content had reached the caller.

    The partial label is true only for an abnormal end (``error.type`` set) after content, so
    classes that end normally never count, whatever they showed: ``paused`` (a server-paused
    turn the caller continues), ``truncated``, ``refused``, ``silently_unverified``. A caller's
    own cancel (class ``cancelled``: a browser tab closed mid-answer) is not a failure and is left
    out; *Caller cancels by model* shows those. The denominator is logical requests (calls minus
    retries, :func:`logical_requests_rate`): retries happen only before the first content, so a
    retried attempt is never partial and the numerator needs no such correction.
    ``or 0 * total`` turns "no partial series yet" into 0: OpenTelemetry creates the
    ``partial="true"`` series on its first increment, and a healthy service may never have one,
    which would otherwise read as "no data" rather than "no partial failures".
    """
    partial = aggregate(by, rate(REQUESTS, window, matchers, f'{PARTIAL}="true"', f'{CLASS}!="cancelled"'))
    total = requests_rate(window, matchers, by)
    return f"(\n  {partial}\n  or 0 * {total}\n)\n/\n{logical_requests_rate(window, matchers, by)}"


def failure_code_ratio(window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """Each failure code's share of calls (every attempt counts: each one met the failure).

    Calls that did not fail carry no code; their series (without the label) is the rest.
    """
    return (
        f"{aggregate((*by, FAILURE_CODE), rate(REQUESTS, window, matchers))}\n"
        f"/ ignoring ({FAILURE_CODE}) group_left\n"
        f"{requests_rate(window, matchers, by)}"
    )


def attempts_rate(window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """Logical requests per second of the retry helpers and the relay (one attempts observation each)."""
    return aggregate(by, rate(f"{ATTEMPTS}_count", window, matchers))


def attempts_mean(window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """Mean attempts per logical request of the retry helpers and the relay (1 = no retries)."""
    return mean(ATTEMPTS, window, matchers, by)


#: Calls that ended with an error: ``error.type`` set, but not by the caller's own cancel.
FAILED_CALL = (f'{ERROR_TYPE}!=""', f'{ERROR_TYPE}!="cancelled"')


def failed_duration_mean(window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """Mean seconds a call that ended with an error (caller cancels excluded) held its slot."""
    return mean(DURATION, window, (*matchers, *FAILED_CALL), by)


def firing_rate(window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """Budget firings per second, per budget (first_token, idle, deadline, read_timeout)."""
    return aggregate((*by, BUDGET), rate(FIRINGS, window, matchers))


def firing_ratio(window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """Budget firings per request, per budget: the share of requests each budget killed."""
    return (
        f"{firing_rate(window, matchers, by)}\n"
        f"/ ignoring ({BUDGET}) group_left\n"
        f"{requests_rate(window, matchers, by)}"
    )


def deadline_unreachable_ratio(window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """Share of requests whose deadline could never fit their thinking budget."""
    return f"{aggregate(by, rate(UNREACHABLE, window, matchers))}\n/\n{requests_rate(window, matchers, by)}"


# -- Resume and the fleet's Redis store --------------------------------------------------------

#: Reconnects whose stream could not be continued although the browser had not seen its end: the
#: buffer had dropped it (``expired``) or the worker that owned it went away mid-stream
#: (``owner_lost``). ``nothing_to_resume`` is left out: it includes the normal case of a page that
#: reconnects after the terminal event (an ``EventSource`` not closed on ``done``).
RESUME_LOST: tuple[str, ...] = ("expired", "owner_lost")


def resumes_rate(window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """Reconnects (``Last-Event-ID``) answered per second, every outcome."""
    return aggregate(by, rate(RESUMES, window, matchers))


def resume_outcome_ratio(window: str, matchers: Sequence[str], by: Sequence[str],
                         outcomes: Sequence[str] = RESUME_LOST) -> str:
    """Share of reconnects that ended with one of ``outcomes`` (default: the stream was lost).

    ``or 0 * total`` turns "no such series yet" into 0: the counter's series for an outcome is
    created on its first increment, and a healthy fleet may never have an ``owner_lost``.
    """
    which = f'{RESUME_OUTCOME_LABEL}=~"{"|".join(outcomes)}"'
    total = resumes_rate(window, matchers, by)
    return f"(\n  {aggregate(by, rate(RESUMES, window, matchers, which))}\n  or 0 * {total}\n)\n/\n{total}"


def store_error_rate(window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """Failed or timed-out operations on the shared Redis store per second."""
    return aggregate(by, rate(STORE_ERRORS, window, matchers))


# -- Spend and waste ---------------------------------------------------------------------------

#: Seconds per hour: spend is counted in US dollars, rates are per second, people read USD/hour.
HOUR = 3600


def spend_rate(window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """US dollars spent per second, every class (retried attempts and failures included)."""
    return aggregate(by, rate(COST, window, matchers))


def wasted_spend_ratio(window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """Share of spend (0..1) on calls whose class bought no answer (``names.WASTED``).

    ``or 0 * total`` turns "no such series yet" into 0: a cost series is created per class on its
    first increment, and a service whose calls all complete has no waste series at all.
    """
    total = spend_rate(window, matchers, by)
    return f"(\n  {aggregate(by, rate(COST, window, matchers, WASTED))}\n  or 0 * {total}\n)\n/\n{total}"


def cost_per_answer(window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """US dollars spent, on every call, per call that ended ``complete``: what one good answer costs
    with the waste around it. A group without a complete call in the window has no value (not +Inf)."""
    answers = aggregate(by, rate(REQUESTS, window, matchers, f'{CLASS}="complete"'))
    return f"{spend_rate(window, matchers, by)}\n/\n({answers} > 0)"
