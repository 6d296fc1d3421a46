"""The triage dashboard's rows, in the order an on-call engineer asks the questions.

Why this order: first what is failing and how badly, then which phase of a streamed call is slow,
then whether the budgets fit what the models do, then where the tokens go, then what the browsers
that a relay serves (``streamscope.serve.relay()``) got, and last whether the fleet around the
relay holds: reconnects resumed, the resume buffer, the shared Redis store, breakers across workers;
then what all of it cost, and how much of the spend bought no answer.
"""

from __future__ import annotations

from .config import Config
from .names import (
    ACTIVE_STREAMS,
    ATTEMPTS,
    BREAKER_STATE,
    BUDGET,
    BUDGET_USED,
    BUFFER_BACKEND_LABEL,
    BUFFER_SIZE,
    CLASS,
    CONTINUATIONS,
    COST,
    DECODE_RATE,
    DURATION,
    ERROR_TYPE,
    FAILURE_CODE,
    HTTP_STATUS_CODE,
    INPUT_TOKENS,
    LE,
    LIMIT,
    MAX_GAP,
    MODEL,
    OPERATION_INPUT_TOKENS,
    OPERATION_OUTPUT_TOKENS,
    OUTPUT_TOKENS,
    REASONING,
    RELAY_OUTCOME,
    RELAY_STREAMS,
    REPLAYED_EVENTS,
    REQUESTS,
    RESUME_OUTCOME_LABEL,
    RETRIES,
    SERVER_TOOL,
    STORE_OPERATION_LABEL,
    STORE_PROBLEM_LABEL,
    THINKING_DURATION,
    TIME_PER_CHUNK,
    TIME_TO_FIRST_CHUNK,
    TIME_TO_HEADERS,
    TOKEN,
    TOKENS,
    TTFC,
    UNOBSERVED,
    UNOBSERVED_BY,
    UNPRICED,
    legend,
)
from .panels import (
    PanelBuilder,
    Query,
    big_number,
    bucket_heatmap,
    budget_vs_p99,
    class_colours,
    graph,
    instant_table,
    quantiles,
    share_bars,
)
from .queries import (
    HOUR,
    PER_BUDGET_KEY,
    PER_MODEL,
    PER_PRICE,
    RESUME_LOST,
    aggregate,
    class_rate,
    cost_per_answer,
    dashboard_filter,
    deadline_unreachable_ratio,
    firing_rate,
    firing_ratio,
    mean,
    partial_ratio,
    quantile,
    rate,
    resume_outcome_ratio,
    resumes_rate,
    sample,
    spend_rate,
    store_error_rate,
    vector,
    wasted_spend_ratio,
)
from .queries import (
    RATE_INTERVAL as R,
)


def failing_now(cfg: Config) -> list[PanelBuilder]:
    """Row 1: which class of failure, how many users saw half an answer, which budget fired."""
    f = dashboard_filter(cfg)
    requests = vector(REQUESTS, f)
    return [
        class_colours(graph(
            "Requests by class", [Query(class_rate(R, f, ()), legend((CLASS,)))], "reqps",
            width=12, stacked=True,
        )),
        share_bars("Class share over the selected range", Query(
            f"sum by ({CLASS}) (increase({requests}[$__range]))\n"
            f"/ ignoring ({CLASS}) group_left\n"
            f"sum(increase({requests}[$__range]))",
            legend((CLASS,)),
        )),
        big_number("Active streams", Query(f"sum({vector(ACTIVE_STREAMS, f)})", "active"),
                   threshold=None if cfg.pool_size is None else cfg.pool_size * cfg.pool_headroom_share),
        graph(
            "Partial-failure ratio by model", [Query(partial_ratio(R, f, PER_MODEL), legend(PER_MODEL))],
            "percentunit", threshold=cfg.partial_ratio_max,
        ),
        graph(
            "Caller cancels by model",
            [Query(aggregate(PER_MODEL, rate(REQUESTS, R, f, f'{CLASS}="cancelled"')), legend(PER_MODEL))],
            "reqps",
        ),
        graph(
            "Budget firings by budget", [Query(firing_rate(R, f, ()), legend((BUDGET,)))], "ops",
            stacked=True,
        ),
        graph(
            "Error types",
            [Query(
                aggregate((ERROR_TYPE,), rate(sample(DURATION, "_count"), R, f, f'{ERROR_TYPE}!=""')),
                legend((ERROR_TYPE,)),
            )],
            "ops", stacked=True,
        ),
        graph(
            "Calls streamscope could not observe",
            # Such a call has no model or route label (streamscope never saw its request): the
            # panel shows it while those filters are All (`=~".*"` matches an absent label).
            [Query(aggregate((UNOBSERVED_BY,), rate(UNOBSERVED, R, f)), legend((UNOBSERVED_BY,)))],
            "ops", stacked=True,
        ),
    ]


def where_time_goes(cfg: Config) -> list[PanelBuilder]:
    """Row 2: each phase of a streamed call, so a slow phase is named, not guessed."""
    f = dashboard_filter(cfg)
    # Latency panels ask Prometheus for exemplars too: a point per traced call, linked to its trace.
    return [
        quantiles("Time to headers", TIME_TO_HEADERS, "s", f, exemplar=True),
        quantiles("Time to first chunk", TIME_TO_FIRST_CHUNK, "s", f, exemplar=True),
        quantiles("Time to first content", TTFC, "s", f, exemplar=True),
        quantiles("Thinking duration", THINKING_DURATION, "s", f, exemplar=True),
        quantiles("Server tool time", SERVER_TOOL, "s", f, qs=(0.5, 0.95), exemplar=True),
        quantiles("Largest gap between content events", MAX_GAP, "s", f, exemplar=True),
        quantiles("Time per output chunk", TIME_PER_CHUNK, "s", f, exemplar=True),
        quantiles("Total duration", DURATION, "s", f, exemplar=True),
        bucket_heatmap(
            "Time to first content (heatmap)",
            Query(aggregate((LE,), rate(f"{TTFC}_bucket", R, f)), legend((LE,))),
            "s",
        ),
    ]


def budgets_right(cfg: Config) -> list[PanelBuilder]:
    """Row 3: are the budgets sized for what the models actually do?"""
    f = dashboard_filter(cfg)
    by_key = legend(PER_BUDGET_KEY)
    return [
        budget_vs_p99("First-token budget vs p99 time to first content", "first_token",
                      quantile(0.99, TTFC, R, f, PER_BUDGET_KEY), f),
        budget_vs_p99("Idle budget vs p99 largest gap", "idle",
                      quantile(0.99, MAX_GAP, R, f, PER_BUDGET_KEY), f),
        budget_vs_p99("Deadline vs p99 total duration", "deadline",
                      quantile(0.99, DURATION, R, f, PER_BUDGET_KEY), f),
        graph(
            "Budget firings per request, by model",
            [Query(firing_ratio(R, f, PER_MODEL), legend((BUDGET, MODEL)))],
            "percentunit", threshold=cfg.first_token_firing_ratio_max,
        ),
        # 1.0 is the whole thinking budget: a fact, not a tunable threshold.
        quantiles("Thinking-budget use", BUDGET_USED, "percentunit", f, threshold=1.0),
        quantiles("Decode rate", DECODE_RATE, "short", f, qs=(0.1, 0.5), axis_label="tokens/s"),
        graph(
            "Deadline cannot fit thinking budget",
            [Query(deadline_unreachable_ratio(R, f, PER_BUDGET_KEY), by_key)],
            "percentunit", width=12,
        ),
        instant_table(
            "Budgets in force",
            Query(aggregate((*PER_BUDGET_KEY, BUDGET), vector(LIMIT, f), op="max")),
            "s", "seconds",
        ),
    ]


def as_type(value: str, expr: str) -> str:
    """``expr`` with the label ``gen_ai_token_type`` set to ``value``: the opt-in's per-direction
    series, made to line up with today's histogram, which carries the direction as that label."""
    return f'label_replace({expr}, "{TOKEN}", "{value}", "", "")'


def tokens_by_type(today: str, inputs: str, outputs: str, f: tuple[str, ...]) -> str:
    """Per-second rates of tokens labelled by direction (``gen_ai_token_type``), whichever names a
    process emits: today's histogram sample ``today`` (it has the label), or the opt-in's input and
    output instruments (``gen_ai_token_modality`` instead; the label is added). To be summed."""
    return (
        f"{rate(today, R, f)}\n"
        f"or {as_type('input', rate(inputs, R, f))}\n"
        f"or {as_type('output', rate(outputs, R, f))}"
    )


def tokens(cfg: Config) -> list[PanelBuilder]:
    """Row 4: where the tokens go, since thinking spends output tokens the user never sees.

    Token counts come from today's ``gen_ai.client.token.usage`` histogram or, under the
    conventions' opt-in, from the per-direction instruments: the usage counters for throughput and
    shares, the per-operation histograms for means (successful calls only, as the conventions say)."""
    f = dashboard_filter(cfg)
    by_type = (*PER_MODEL, TOKEN)
    reasoning_legend = f"reasoning {legend(PER_MODEL)}"
    type_legend = legend((TOKEN, MODEL))
    output = f'{TOKEN}="output"'
    per_call = (
        aggregate(by_type, tokens_by_type(f"{TOKENS}_sum", f"{OPERATION_INPUT_TOKENS}_sum",
                                          f"{OPERATION_OUTPUT_TOKENS}_sum", f))
        + "\n/\n"
        + aggregate(by_type, tokens_by_type(f"{TOKENS}_count", f"{OPERATION_INPUT_TOKENS}_count",
                                            f"{OPERATION_OUTPUT_TOKENS}_count", f))
    )
    output_rate = f"{rate(f'{TOKENS}_sum', R, f, output)}\nor {rate(OUTPUT_TOKENS, R, f)}"
    return [
        graph(
            "Token throughput by type",
            [
                Query(aggregate(by_type, tokens_by_type(f"{TOKENS}_sum", INPUT_TOKENS, OUTPUT_TOKENS, f)),
                      type_legend),
                Query(aggregate(PER_MODEL, rate(f"{REASONING}_sum", R, f)), reasoning_legend),
            ],
            "short", axis_label="tokens/s",
        ),
        graph(
            "Mean tokens per request",
            [
                Query(per_call, type_legend),
                Query(mean(REASONING, R, f, PER_MODEL), reasoning_legend),
            ],
            "short", axis_label="tokens",
        ),
        graph(
            "Reasoning share of output tokens",
            [Query(
                f"{aggregate(PER_MODEL, rate(f'{REASONING}_sum', R, f))}\n/\n"
                f"{aggregate(PER_MODEL, output_rate)}",
                legend(PER_MODEL),
            )],
            "percentunit",
        ),
    ]


def serving(cfg: Config) -> list[PanelBuilder]:
    """Row 5: what browsers served by the relay got, and what the retries before the stream cost."""
    f = dashboard_filter(cfg)
    failed = f'{FAILURE_CODE}!=""'  # the label is absent (empty) on calls and streams that did not fail
    return [
        graph(
            "Relayed streams by outcome",
            [Query(aggregate((RELAY_OUTCOME,), rate(RELAY_STREAMS, R, f)), legend((RELAY_OUTCOME,)))],
            "reqps", stacked=True,
        ),
        graph(
            "Failure codes",
            [
                Query(aggregate((FAILURE_CODE,), rate(REQUESTS, R, f, failed)), f"calls {legend((FAILURE_CODE,))}"),
                Query(aggregate((FAILURE_CODE,), rate(RELAY_STREAMS, R, f, failed)),
                      f"relayed {legend((FAILURE_CODE,))}"),
            ],
            "ops",
        ),
        graph(
            "Statuses before the stream",
            [Query(aggregate((HTTP_STATUS_CODE,), rate(RELAY_STREAMS, R, f, f'{HTTP_STATUS_CODE}!="200"')),
                   legend((HTTP_STATUS_CODE,)))],
            "reqps", stacked=True,
        ),
        graph(
            "Attempts per request",
            [Query(mean(ATTEMPTS, R, f, PER_MODEL), legend(PER_MODEL))],
            "short", axis_label="attempts",
        ),
        graph(
            "Retries by failure code",
            [Query(aggregate((FAILURE_CODE,), rate(RETRIES, R, f)), legend((FAILURE_CODE,)))],
            "ops", stacked=True,
        ),
        graph(
            "Continuations by outcome",
            [Query(aggregate((RELAY_OUTCOME,), rate(CONTINUATIONS, R, f)), legend((RELAY_OUTCOME,)))],
            "ops", stacked=True,
        ),
        graph(
            "Client disconnects by model",
            [Query(aggregate(PER_MODEL, rate(RELAY_STREAMS, R, f, f'{RELAY_OUTCOME}="client_disconnect"')),
                   legend(PER_MODEL))],
            "reqps",
        ),
    ]


def fleet(cfg: Config) -> list[PanelBuilder]:
    """Row 6: browsers that reconnect (``Last-Event-ID``) and what the workers share to resume them.

    The resume, buffer and store series carry no provider, model or route (a reconnect or a store
    operation is the worker's, not a call's): they show while those filters are All."""
    f = dashboard_filter(cfg)
    key = legend(PER_BUDGET_KEY)
    return [
        graph(
            "Resumes by outcome",
            [Query(resumes_rate(R, f, (RESUME_OUTCOME_LABEL,)), legend((RESUME_OUTCOME_LABEL,)))],
            "reqps", stacked=True,
        ),
        graph(
            "Reconnects that could not resume",
            # Stacked, the lost share (the alert's, under its dashed threshold) at the bottom and
            # nothing_to_resume on top: the top line is every reconnect that did not resume.
            [Query(resume_outcome_ratio(R, f, ()), "lost (" + ", ".join(RESUME_LOST) + ")"),
             Query(resume_outcome_ratio(R, f, (), ("nothing_to_resume",)), "nothing_to_resume")],
            "percentunit", stacked=True, threshold=cfg.resume_failure_share_max,
        ),
        graph(
            "Replayed events",
            [Query(aggregate((), rate(REPLAYED_EVENTS, R, f)), "replayed")],
            "ops",
        ),
        graph(
            "Resume buffer size by backend",
            [Query(aggregate((BUFFER_BACKEND_LABEL,), vector(BUFFER_SIZE, f)), legend((BUFFER_BACKEND_LABEL,)))],
            "bytes", stacked=True,
        ),
        graph(
            "Store errors by operation",
            [Query(store_error_rate(R, f, (STORE_OPERATION_LABEL, STORE_PROBLEM_LABEL)),
                   legend((STORE_OPERATION_LABEL, STORE_PROBLEM_LABEL)))],
            "ops", stacked=True,
        ),
        graph(
            "Workers with the breaker open",
            # One series per scrape target and key; `== bool` keeps closed breakers as 0s.
            [Query(aggregate(PER_BUDGET_KEY, f"{vector(BREAKER_STATE, f)} == bool 2"), f"open {key}"),
             Query(aggregate(PER_BUDGET_KEY, f"{vector(BREAKER_STATE, f)} == bool 1"), f"half-open {key}")],
            "short", axis_label="workers", dashed_series="^half-open .*",
        ),
    ]


def spend(cfg: Config) -> list[PanelBuilder]:
    """Row 7: what the calls cost in US dollars, and the share that bought no answer.

    Every finished call is priced once (``streamscope_cost_USD_total``), retried attempts and failed
    calls included; a model with no known price counts on ``streamscope_cost_unpriced_total`` instead."""
    f = dashboard_filter(cfg)
    by_price = legend(PER_PRICE)
    per_hour = "USD/hour"
    return [
        graph(
            "Spend by model",
            [Query(f"{spend_rate(R, f, PER_PRICE)} * {HOUR}", by_price)],
            "currencyUSD", width=12, axis_label=per_hour,
        ),
        big_number("Spend over the selected range",
                   Query(f"sum(increase({vector(COST, f)}[$__range]))", "spent"), "currencyUSD"),
        graph(
            "Unpriced calls",
            [Query(aggregate(PER_PRICE, rate(UNPRICED, R, f)), by_price)],
            "reqps", width=6,
        ),
        class_colours(graph(
            "Spend by class",
            [Query(f"{spend_rate(R, f, (CLASS,))} * {HOUR}", legend((CLASS,)))],
            "currencyUSD", stacked=True, axis_label=per_hour,
        )),
        graph(
            "Wasted share of spend by route",
            # Model and route: the alert's key (a route can call several models), and a name for
            # the calls without a route.
            [Query(wasted_spend_ratio(R, f, PER_BUDGET_KEY), legend(PER_BUDGET_KEY))],
            "percentunit", threshold=cfg.wasted_spend_share_max,
        ),
        graph(
            "Cost per successful answer",
            [Query(cost_per_answer(R, f, PER_PRICE), by_price)],
            "currencyUSD", axis_label="USD/answer",
        ),
    ]


#: The rows, top to bottom: title and the function building its panels.
ROWS = (
    ("What is failing now", failing_now),
    ("Where the time goes", where_time_goes),
    ("Are the budgets right", budgets_right),
    ("Tokens", tokens),
    ("Serving to browsers", serving),
    ("Resume and the fleet", fleet),
    ("Spend and waste", spend),
)
