"""`streamscope demo` (what `make demo` runs): the workload's classes come out as designed,
through the real SDK, `/metrics` is served while it runs, and the demo page relays answers to a
browser with `streamscope.serve.relay()` (read here over real HTTP, as a browser reads it)."""

from __future__ import annotations

import io
import re
import socket
import subprocess
import sys
import urllib.request
from collections import Counter

import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families
from served import SseParser

from streamscope.budgets.table import BudgetTable
from streamscope.core.classifier import LABELS
from streamscope.simulator import Silence, TextSpec, ThinkingSpec, message_stream
from streamscope.tools import demo, demo_page
from streamscope.tools.cli import main
from streamscope.tools.workload import (
    BUDGETS_MODEL_SECONDS,
    CHAT,
    KINDS,
    MARGIN,
    REASONING,
    THOUGHT,
    UNPRICED,
    WORD,
    Request,
    expected_mix,
    margin,
    tour,
    workload,
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_short_mixed_run_matches_its_design() -> None:
    requests = workload(45, seed=11)
    assert {r.kind for r in requests} == set(KINDS)  # every kind at least once
    port = free_port()
    scraped: list[str] = []

    def progress(_request) -> None:
        if not scraped:  # while the run is still going
            scraped.append(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode())

    run = demo.run(requests, scale=0.1, concurrency=8, prometheus_port=port, progress=progress)
    try:
        assert not run.missing
        got = Counter(str(span.attributes["streamscope.class"]) for _, span in run.results)
        assert got == Counter(expected_mix(requests))
        assert [(r.kind, r.expect) for r, s in run.results if s.attributes["streamscope.class"] != r.expect] == []
        assert "streamscope_active_streams" in scraped[0]
        final = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert 'streamscope_requests_total{' in final and 'streamscope_class="stalled_mid_stream"' in final
        # The workload also read the demo page's relay endpoint: every outcome, a retry, a status before
        # the stream; and every provider call is counted once.
        samples = [s for f in text_string_to_metric_families(final) for s in f.samples]
        relayed = Counter()
        for s in samples:
            if s.name == "streamscope_relay_streams_total":
                relayed[(s.labels["streamscope_relay_outcome"], s.labels["http_response_status_code"])] += s.value
        assert relayed == {("done", "200"): 4, ("error", "200"): 1, ("error", "503"): 1,
                           ("client_disconnect", "200"): 1}
        assert run.relayed == len(demo_page.CYCLE)
        retries = {s.labels["streamscope_failure_code"]: s.value for s in samples
                   if s.name == "streamscope_retries_total"}
        assert retries == {"upstream_unavailable": 1 + (demo_page.ATTEMPTS - 1)}  # retried, overloaded
        assert sum(s.value for s in samples if s.name == "streamscope_requests_total") == demo_page.provider_calls(45)
        # Every call is priced but the refusals, which the endpoint says a model with no price answered:
        # the spans and the counters the dashboards' "Spend and waste" row reads agree.
        refusals = [span for r, span in run.results if r.kind == "refusal"]
        assert refusals and all("streamscope.cost.usd" not in span.attributes for span in refusals)
        assert {span.attributes["gen_ai.response.model"] for span in refusals} == {UNPRICED}
        costs = [span.attributes["streamscope.cost.usd"] for r, span in run.results if r.kind != "refusal"]
        assert len(costs) == len(run.results) - len(refusals) and sum(costs) > 0
        spent = sum(s.value for s in samples if s.name == "streamscope_cost_USD_total")
        assert spent >= sum(costs)  # and the relayed reads' calls
        unpriced = [s for s in samples if s.name == "streamscope_cost_unpriced_total"]
        assert [(s.labels["gen_ai_request_model"], s.value) for s in unpriced] == [(CHAT, len(refusals))]
    finally:
        run.telemetry.shutdown()


@pytest.fixture
def page() -> str:
    """The demo page of a demo with no workload (the page's scripts only); streamscope is on for the test."""
    with demo.Demo([], scale=0.05, page_port=0) as session:
        try:
            assert session.page is not None
            yield session.page.url
        finally:
            session.telemetry.shutdown()


def read(url: str) -> tuple[httpx2.Response, str, SseParser]:
    """One GET read to its end as a browser reads an event stream."""
    parser = SseParser()
    with httpx2.Client(timeout=30) as client, client.stream("GET", url) as response:
        body = ""
        for text in response.iter_text():
            body += text
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                parser.feed(text)
        return response, body, parser


def test_the_demo_page_is_served_with_no_external_assets(page: str) -> None:
    response, body, _ = read(page)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    for kind in demo_page.KINDS.values():
        assert f'"name": "{kind.name}"' in body and kind.label in body
    assert 'from "/streamscope/client.js"' in body and "relayStream(`relay/${kind.name}`" in body  # the client
    assert not re.search(r"""(src|href|from)\s*=?\s*["']?(https?:)?//""", body), "an external asset"
    assert "INCOMPLETE" in body
    client, _, _ = read(page + "streamscope/client.js")
    assert client.status_code == 200 and client.headers["content-type"].startswith("text/javascript")


def test_a_page_read_gets_tokens_then_done(page: str) -> None:
    response, _, parser = read(page + "relay/answer")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    names = [e.event for e in parser.events]
    assert names[-1] == "done" and names.count("done") == 1 and "error" not in names
    assert set(names[:-1]) == {"token"} and len(names) > 10
    done = parser.events[-1].json
    text = "".join(e.json["text"] for e in parser.events if e.event == "token")
    assert text.startswith("Streams fail in ways")
    assert done == {"request_id": response.headers["x-request-id"], "chunks": len(names) - 1,
                    "finish_reason": "end_turn", "class": "complete", "verified": True}


def test_thinking_reaches_the_page_before_the_answer(page: str) -> None:
    _, _, parser = read(page + "relay/thinking")
    names = [e.event for e in parser.events]
    assert names[0] == "thinking" and names.index("token") > names.index("thinking")
    assert parser.events[-1].event == "done" and parser.events[-1].json["class"] == "complete"


def test_an_overload_before_the_stream_is_a_503_with_a_json_body(page: str) -> None:
    response, body, _ = read(page + "relay/overloaded")
    assert response.status_code == 503 and response.headers["content-type"] == "application/json"
    assert httpx2.Response(503, content=body).json() == {"code": "upstream_unavailable",
                                                          "request_id": response.headers["x-request-id"]}


def test_an_overload_mid_answer_is_one_partial_error_event(page: str) -> None:
    response, _, parser = read(page + "relay/cut")
    assert response.status_code == 200
    assert [e.event for e in parser.events][-1] == "error"
    assert parser.events[-1].json == {"code": "upstream_unavailable", "request_id": response.headers["x-request-id"],
                                      "partial": True}
    assert sum(e.event == "token" for e in parser.events) == 14


def test_an_overload_mid_answer_is_carried_on_from_its_last_sentence(page: str) -> None:
    response, _, parser = read(page + "relay/continued")
    assert response.status_code == 200
    names = [e.event for e in parser.events]
    assert names.count("seam") == 1 and names[-1] == "done" and parser.events[-1].json["class"] == "complete"
    text = ""
    for event in parser.events:
        if event.event == "token":
            text += event.json["text"]
        elif event.event == "seam":
            text = text[: len(text) - event.json["drop"]]
    assert text == "Streams fail in two ways. Some stop before the first token. Others stop half way through an " \
                   "answer, after the page has shown part of it."


def test_an_unknown_kind_is_a_404(page: str) -> None:
    response, body, _ = read(page + "relay/nope")
    assert response.status_code == 404 and "answer" in body


def test_the_tour_covers_every_class(capsys) -> None:
    assert {r.expect for r in tour()} == set(LABELS)
    assert main(["demo", "--tour", "--port", "0", "--time-scale", "0.1"]) == 0
    out = capsys.readouterr().out
    # A cost per request, in cents: estimated for a stream cut before its usage, none for the refusal.
    assert out.split("\n ─")[0].split()[-2:] == ["cost", "¢"]
    cells = {label: words[-1] for words in map(str.split, out.splitlines()) if len(words) > 7
             for label in words[:4] if label in LABELS}
    assert cells["refused"] == "-" and cells["stalled_mid_stream"].startswith("~")
    assert re.fullmatch(r"\d+(\.\d+)?", cells["complete"]) and cells["upstream_error"] == "0"
    assert "Spend: $" in out and "Wasted: $" in out and f"answered by {UNPRICED}" in " ".join(out.split())
    assert "every span carries the class its script was written for" in " ".join(out.split())
    for label in LABELS:
        assert label in out
    assert re.search(r"the demo page, answers relayed to a browser: http://127\.0\.0\.1:\d+/", out)
    assert f"and {len(demo_page.CYCLE)} reads of the demo page's relay endpoint" in " ".join(out.split())


def test_the_triage_table(capsys) -> None:
    assert main(["demo", "--requests", "30", "--port", "0", "--time-scale", "0.1", "--concurrency", "8"]) == 0
    out = capsys.readouterr().out
    for heading in ("requests per class and model", "budget firings", "phase percentiles", "Look at first"):
        assert heading in out
    header = next(line for line in out.splitlines() if line.split()[:1] == ["class"])
    assert header.split()[-4:] == ["total", "designed", "partial", "spend"]
    flat = " ".join(out.split())
    spend = re.search(r"Spend: \$([\d.]+) on (\d+) of 30 requests, \$[\d.]+ per complete answer; simulated models "
                      r"priced at Claude Sonnet 4\.5's rates \(\$3 input, \$15 output per million tokens\)\.", flat)
    assert spend, flat
    all_row = next(line for line in out.splitlines() if line.split()[:1] == ["all"])
    assert all_row.split()[-1] == f"${spend.group(1)}"  # the table's total is the summary's
    assert re.search(r"Wasted: \$[\d.]+ \([\d.]+% of spend\) on requests that bought no answer: [a-z_, ]+\.", flat)
    refused = next(line for line in out.splitlines() if line.split()[:1] == ["refused"])
    assert refused.split()[-1] == "-"  # unpriced, not $0
    assert re.search(rf"Unpriced: {30 - int(spend.group(2))} requests? answered by {UNPRICED}, a model with no "
                     r"price given", flat)


def test_the_spend_lines_by_hand() -> None:
    """Two answers of $0.02, a stall of $0.005 (estimated), an overload before the stream ($0: no
    usage), a refusal answered by a model with no price: $0.045 on 4 of 5 requests, $0.0225 per
    answer, $0.005 of it (11.1 %) wasted, one request unpriced."""
    from streamscope.tools.demo_spend import Spent

    answer = {"streamscope.cost.usd": 0.02, "streamscope.cost.estimated": False, "gen_ai.usage.input_tokens": 1500}
    spent = Spent([("complete", answer), ("complete", answer),
                   ("stalled_mid_stream", {"streamscope.cost.usd": 0.005, "streamscope.cost.estimated": True,
                                           "gen_ai.usage.input_tokens": 1500}),
                   ("upstream_error", {"streamscope.cost.usd": 0.0, "streamscope.cost.estimated": False}),
                   ("refused", {"gen_ai.usage.input_tokens": 1500, "gen_ai.request.model": CHAT,
                                "gen_ai.response.model": UNPRICED})])
    assert spent.lines() == [
        "Spend: $0.0450 on 4 of 5 requests, $0.0225 per complete answer; simulated models priced at Claude Sonnet "
        "4.5's rates ($3 input, $15 output per million tokens).",
        "Wasted: $0.00500 (11.1% of spend) on requests that bought no answer: stalled_mid_stream.",
        f"Unpriced: 1 request answered by {UNPRICED}, a model with no price given: not in the spend; the dashboards' "
        "Unpriced calls panel counts it.",
    ]
    assert (spent.by_class("complete"), spent.by_class("upstream_error"), spent.by_class("refused")) == \
        ("$0.0400", "$0", "-")


# ---------------------------------------------------------------- a demo that always passes


def test_every_script_stays_clear_of_the_budgets_that_judge_it() -> None:
    """The self-check holds on a loaded machine because no script comes near a budget decision:
    healthy streams end every wait MARGIN model seconds before its budget, failing ones overrun
    theirs by as much (checked for the default workload, twenty other seeds and the tour)."""
    batches = [workload(150, seed) for seed in range(20)] + [workload(), tour()]
    smallest = min(margin(r) for batch in batches for r in batch)
    assert smallest >= MARGIN, smallest


def test_the_margin_sees_a_script_that_comes_too_close() -> None:
    """The margin check can fail: a chat answer whose first text comes just before its first-token
    budget, a stall just past idle, a thinking phase the deadline barely reaches."""
    budgets = BudgetTable.from_config(BUDGETS_MODEL_SECONDS)
    chat = budgets.resolve(CHAT, "chat")
    late = Request(0, "late answer", "complete", CHAT, "chat",
                   tuple(message_stream(blocks=[TextSpec([WORD] * 3, first_delay=chat.first_token - 1)])))
    assert 0 < margin(late) < 2
    short_stall = Request(1, "short stall", "stalled_mid_stream", CHAT, "chat", tuple(message_stream(
        blocks=[TextSpec([WORD, Silence(chat.idle + 2), WORD], interval=0.1)])))
    assert 0 < margin(short_stall) < 3
    interactive = budgets.resolve(REASONING, "interactive")
    barely = Request(2, "barely", "deadline_in_thinking", REASONING, "interactive", tuple(message_stream(
        thinking=ThinkingSpec([THOUGHT] * 20, duration=interactive.deadline + 1), blocks=[TextSpec([WORD])])))
    assert margin(barely) < 2


def _lines(text: str) -> list[str]:
    return text.splitlines()


def test_output_fits_100_columns_and_no_traceback_reaches_the_terminal(capfd) -> None:
    assert main(["demo", "--requests", "20", "--port", "0", "--time-scale", "0.1", "--concurrency", "8"]) == 0
    out, err = capfd.readouterr()
    assert max(len(line) for line in _lines(out)) <= 100
    assert "Traceback" not in out + err
    assert "Self-check: each of the 20 requests follows a script written for one class" in out
    assert "Passed: every request produced one span, and every span carries the class" in " ".join(_lines(out))
    assert main(["demo", "--tour", "--port", "0", "--time-scale", "0.1"]) == 0
    out, err = capfd.readouterr()
    assert max(len(line) for line in _lines(out)) <= 100
    assert "Traceback" not in out + err


def test_a_busy_port_picks_another_and_says_so(capsys) -> None:
    with socket.socket() as taken, socket.socket() as taken_page:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        taken_page.bind(("127.0.0.1", 0))
        taken_page.listen()
        port, page_port = taken.getsockname()[1], taken_page.getsockname()[1]
        assert main(["demo", "--requests", "17", "--port", str(port), "--page-port", str(page_port),
                     "--time-scale", "0.05"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"port {port} is in use: serving /metrics on another free port (choose one with --port N)" in out
    served = re.search(r"metrics were served on http://127\.0\.0\.1:(\d+)/metrics", out)
    assert served and int(served.group(1)) != port
    assert f"port {page_port} is in use: serving the demo page on another free port (choose one with " \
           "--page-port N)" in out
    moved = re.search(r"the demo page, answers relayed to a browser: http://127\.0\.0\.1:(\d+)/", out)
    assert moved and int(moved.group(1)) not in (page_port, port)


def test_a_failed_self_check_says_which_requests_and_what_to_try() -> None:
    """With no budgets, the stalls and deadlines of the tour are never caught: the self-check
    names each request, what it was written for and what it got, and exits 1 (a finding)."""
    from rich.console import Console

    from streamscope.tools.commands.demo import self_check

    requests = [r for r in tour() if r.expect in ("stalled_mid_stream", "complete")]
    run = demo.run(requests, scale=0.01, concurrency=8, budgets=BudgetTable())
    try:
        out = io.StringIO()
        assert self_check(Console(file=out, width=100), run, requests) is False
    finally:
        run.telemetry.shutdown()
    text = " ".join(out.getvalue().split())
    stalls = [r for r in requests if r.expect == "stalled_mid_stream"]
    failed = f"Failed: {len(stalls)} of {len(requests)} requests got another class than their script was written for"
    assert failed in text
    for r in stalls:
        assert f"request {r.number} ({r.kind}): written for stalled_mid_stream, got complete" in text
    assert "a larger time scale gives every script more real time: streamscope demo --time-scale 0.02" in text


@pytest.mark.parametrize("args, words", [
    (["--time-scale", "0"], "argument --time-scale: expected real seconds per model second, > 0 and <= 10"),
    (["--time-scale", "nan"], "argument --time-scale: expected real seconds per model second"),
    (["--concurrency", "0"], "argument --concurrency: expected a whole number >= 1, got '0'"),
    (["--requests", "-3"], "argument --requests: expected a whole number >= 1, got '-3'"),
    (["--port", "70000"], "argument --port: expected a TCP port 0-65535 (0: any free port), got '70000'"),
    (["--page-port", "-1"], "argument --page-port: expected a TCP port 0-65535 (0: any free port), got '-1'"),
])
def test_bad_arguments_are_one_line_and_exit_2(args: list[str], words: str) -> None:
    done = subprocess.run([sys.executable, "-m", "streamscope.tools.cli", "demo", *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert words in done.stderr


BLOCK_STARLETTE = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "starlette":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Block())
from streamscope.tools.cli import main
sys.exit(main(["demo", "--tour", "--port", "0"]))
"""


def test_without_the_demo_extra_it_says_what_to_install() -> None:
    done = subprocess.run([sys.executable, "-c", BLOCK_STARLETTE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert [line for line in done.stderr.splitlines() if line.strip()] == [
        "streamscope demo: the demo needs starlette, which is not installed; install the demo extra: "
        "pip install 'streamscope[demo]' (or run `make demo` in a checkout)"]


def test_the_demo_page_in_a_browser(page: str) -> None:
    """Debian's headless Chromium clicks the page's buttons: each answer ends as its kind says, the
    continued one with no half sentence, and Stop leaves the slow one."""
    from playwright.sync_api import sync_playwright
    from test_browser import CHROMIUM, CHROMIUM_ARGS

    ends = {"answer": "COMPLETE", "truncated": "ENDED: max_tokens", "retried": "COMPLETE", "overloaded": "FAILED",
            "cut": "INCOMPLETE", "continued": "COMPLETE"}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            tab = browser.new_page()
            tab.goto(page)
            for kind in [*ends, "slow"]:
                tab.click(f'#buttons button[data-kind="{kind}"]')
            card = tab.locator('.card[data-kind="slow"]')
            card.locator(".answer").filter(has_text=re.compile(r"\w+ \w+ \w+")).wait_for(timeout=20_000)
            card.locator("button", has_text="Stop").click()
            for kind, badge in {**ends, "slow": "STOPPED"}.items():
                found = tab.locator(f'.card[data-kind="{kind}"]:not([data-state="streaming"]) .badge')
                found.wait_for(timeout=30_000)
                assert found.text_content() == badge, kind
            overloaded = tab.locator('.card[data-kind="overloaded"] .note').text_content() or ""
            assert "HTTP 503 before the stream, code upstream_unavailable" in overloaded
            continued = tab.locator('.card[data-kind="continued"] .answer').text_content()
            assert continued == "Streams fail in two ways. Some stop before the first token. Others stop half way " \
                                "through an answer, after the page has shown part of it."
        finally:
            browser.close()
