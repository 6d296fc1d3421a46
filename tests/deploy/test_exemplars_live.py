"""From a latency spike to its trace, for real: a Prometheus with exemplar storage
(`--enable-feature=exemplar-storage`, Debian's `prometheus`) scrapes, over OpenMetrics, one
process serving its own `/metrics` (`setup(prometheus_port=0)`) and one multiprocess setup (a
master serving the sum with `serve_metrics()`, two forked workers writing `PROMETHEUS_MULTIPROC_DIR`,
as under gunicorn). Each runs real Anthropic SDK streams against the simulator with streamscope
and a real TracerProvider exporting to memory; `/api/v1/query_exemplars` then gives back the
trace ids (and span ids) of exactly the spans those processes exported, the slow stream's on the
bucket its time to first content fell in.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_dashboards import load_script

from streamscope.simulator import SCENARIOS, Scenario, Simulator, TextSpec, message_stream
from streamscope.simulator.catalog import ANSWER, words

live = load_script("live")
eventually = live.eventually

SPIKE_DELAY = 1.1
"""The slow stream's first text (s): past the 1.0 bound of time to first content, whatever the load."""
SPIKE = Scenario.single("exemplar_spike", message_stream(blocks=[TextSpec(words(ANSWER)[:6], first_delay=SPIKE_DELAY,
                                                                          interval=0.02)]))
FAST_CALLS = 3

CHILD = textwrap.dedent(
    """
    import json, os, sys
    import anthropic
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from streamscope import AnthropicInstrumentor
    from streamscope.telemetry import serve_metrics, setup, worker_exit

    mode, base, fast = sys.argv[1], sys.argv[2], int(sys.argv[3])
    USER = [{"role": "user", "content": "How do streams fail?"}]

    def streams(tag, port):
        telemetry = setup("exemplars-" + mode, otlp=False, prometheus_port=port, set_global=False)
        exporter = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        AnthropicInstrumentor().instrument(tracer_provider=tracer_provider, meter_provider=telemetry.meter_provider)
        for model, scenario in [(tag + "-fast", "complete")] * fast + [(tag + "-spike", "exemplar_spike")]:
            client = anthropic.Anthropic(base_url=base + scenario, api_key="test-key", max_retries=0)
            for _ in client.messages.create(model=model, max_tokens=64, messages=USER, stream=True):
                pass
        spans = [{"trace_id": format(s.context.trace_id, "032x"), "span_id": format(s.context.span_id, "016x"),
                  "model": s.attributes.get("gen_ai.request.model")}
                 for s in exporter.get_finished_spans() if s.instrumentation_scope.name == "streamscope"]
        return telemetry, spans

    if mode == "single":
        telemetry, spans = streams("single", 0)
        print("PORT", telemetry.prometheus_port, flush=True)
    else:  # a master serving the sum, two forked workers (gunicorn's when_ready, then its workers)
        telemetry = None
        server = serve_metrics(0)
        print("PORT", server.port, flush=True)
        spans = []
        for i in range(2):
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read)
                worker_telemetry, mine = streams(f"w{i}", None)
                worker_telemetry.shutdown()
                os.write(write, json.dumps(mine).encode())
                os._exit(0)
            os.close(write)
            with os.fdopen(read) as pipe:
                spans += json.loads(pipe.read() or "[]")
            os.waitpid(pid, 0)
            worker_exit(pid)  # gunicorn's child_exit
    print("SPANS", json.dumps(spans), flush=True)
    sys.stdin.read()
    if telemetry is not None:
        telemetry.shutdown()
    """
)


class ExemplarPrometheus(live.PromAPI, live._Process):
    """Debian's `prometheus` with exemplar storage on, scraping each job's target every second.
    Prometheus asks for OpenMetrics first (the only format exemplars travel in); 2.49 and later
    can be told so explicitly with `scrape_protocols`, which this older one would reject."""

    name = "prometheus"

    def __init__(self, directory: Path, targets: dict[str, int]) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("Debian's prometheus is not installed: run scripts/ensure-prometheus")
        directory.mkdir(parents=True, exist_ok=True)
        self.port = live.free_port()
        super().__init__(f"http://127.0.0.1:{self.port}")
        jobs = "".join(f"""
              - job_name: {job}
                static_configs:
                  - targets: ["127.0.0.1:{port}"]""" for job, port in targets.items())
        config = directory / "prometheus.yml"
        config.write_text(textwrap.dedent("""\
            global:
              scrape_interval: 1s
              scrape_timeout: 1s
            scrape_configs:""") + textwrap.dedent(jobs) + "\n")
        self._start(directory, [binary, f"--config.file={config}", f"--storage.tsdb.path={directory / 'data'}",
                                f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn",
                                "--enable-feature=exemplar-storage"])

    def exemplars(self, selector: str, start: float) -> list[dict[str, Any]]:
        """`/api/v1/query_exemplars` for `selector` since `start`: one row per series with its exemplars."""
        return list(self.api("query_exemplars", query=selector, start=start, end=time.time() + 60) or [])


class Child:
    """The CHILD script in one mode; its port, then the spans it exported."""

    def __init__(self, tmp_path: Path, mode: str, base: str) -> None:
        script = tmp_path / "child.py"
        if not script.exists():
            script.write_text(CHILD)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        if mode == "multi":
            directory = tmp_path / "multiproc"
            directory.mkdir()
            env["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
        self.stderr_path = tmp_path / f"{mode}.stderr"
        with self.stderr_path.open("w") as stderr:
            self.proc = subprocess.Popen([sys.executable, str(script), mode, base, str(FAST_CALLS)], cwd=tmp_path,
                                         env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                         text=True)
        self._timer = threading.Timer(150, self.proc.kill)
        self._timer.start()

    def line(self, prefix: str) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith(prefix), (line, self.stderr_path.read_text()[-5000:])
        return line[len(prefix):].strip()

    def stop(self) -> None:
        self._timer.cancel()
        if self.proc.poll() is None:
            try:
                self.proc.communicate(input="", timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def simulator() -> Iterator[Simulator]:
    with Simulator({**SCENARIOS, SPIKE.name: SPIKE}) as sim:
        yield sim


def _seen(rows: list[dict[str, Any]]) -> list[tuple[dict[str, str], dict[str, Any]]]:
    return [(row["seriesLabels"], exemplar) for row in rows for exemplar in row["exemplars"]]


def test_query_exemplars_returns_the_exported_spans_trace_ids(tmp_path: Path, simulator: Simulator) -> None:
    base = f"http://127.0.0.1:{simulator.port}/s/"
    started = time.time() - 5
    children: dict[str, Child] = {}
    for mode in ("single", "multi"):
        (tmp_path / mode).mkdir()
        children[mode] = Child(tmp_path / mode, mode, base)
    prom = None
    try:
        ports = {mode: int(child.line("PORT ")) for mode, child in children.items()}
        prom = ExemplarPrometheus(tmp_path / "prometheus", {f"exemplars-{m}": p for m, p in ports.items()})
        prom.wait_ready()
        spans = {mode: json.loads(child.line("SPANS ")) for mode, child in children.items()}
        assert len(spans["single"]) == FAST_CALLS + 1, spans
        assert len(spans["multi"]) == 2 * (FAST_CALLS + 1), spans

        for mode, exported in spans.items():
            job = f"exemplars-{mode}"
            ids = {(s["trace_id"], s["span_id"]) for s in exported}
            spikes = {s["trace_id"] for s in exported if s["model"].endswith("-spike")}

            # The slow streams: on the time-to-first-content bucket past 1 s, each spike's own trace.
            spike_selector = ('streamscope_time_to_first_content_seconds_bucket'
                              f'{{job="{job}",gen_ai_request_model=~".*-spike"}}')

            def spike_traces(selector: str = spike_selector, spikes: set[str] = spikes) -> set[str] | None:
                found = {e["labels"]["trace_id"] for _, e in _seen(prom.exemplars(selector, started))}
                return found if found >= spikes else None

            assert eventually(spike_traces, timeout=60) == spikes, (mode, prom.exemplars(spike_selector, started))
            for labels, exemplar in _seen(prom.exemplars(spike_selector, started)):
                assert float(exemplar["value"]) >= SPIKE_DELAY, (labels, exemplar)
                assert float(labels["le"]) > 1.0 and float(exemplar["value"]) <= float(labels["le"]), (labels, exemplar)

            # Every exemplar on every histogram: a span this job's processes exported, trace and span id.
            everything = f'{{job="{job}",__name__=~".+_bucket"}}'
            seen = _seen(prom.exemplars(everything, started))
            assert seen, mode
            pairs = {(e["labels"]["trace_id"], e["labels"]["span_id"]) for _, e in seen}
            assert pairs <= ids, (mode, pairs - ids)
            assert {labels["__name__"] for labels, _ in seen} >= {
                "streamscope_time_to_first_content_seconds_bucket", "gen_ai_client_operation_duration_seconds_bucket"}
            if mode == "multi":  # both workers' streams reach the one page
                workers = {s["model"].split("-")[0] for s in exported if (s["trace_id"], s["span_id"]) in pairs}
                assert workers == {"w0", "w1"}, pairs
    finally:
        if prom is not None:
            prom.stop()
        for child in children.values():
            child.stop()
    for mode, child in children.items():
        assert child.proc.returncode == 0, (mode, child.stderr_path.read_text()[-5000:])
