"""Ordinary mistakes get one line on stderr and exit 2, never a traceback; findings exit 1; a bug
exits 70 and Ctrl-C 130. Also: the span formats `classify` reads (the console exporter's output
from a real ConsoleSpanExporter), `--version`, a parser that imports no heavy dependency, and
the defaults shown in every help text."""

from __future__ import annotations

import argparse
import http.server
import json
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import MessageToJson
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from conftest import USER, Telemetry, client
from streamscope._version import __version__
from streamscope.core.classifier import classify
from streamscope.tools.cli import Formatter, build_parser, main
from streamscope.tools.spanfile import read_spans

FORMATS = ("OTLP JSON", "JSON lines of span attributes", "console exporter")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Exit code, stdout, stderr of `streamscope argv` (argparse's own errors exit by SystemExit)."""
    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, _, err = cli(capsys, *argv)
    assert code == 2, err
    line = one_line(err)
    assert line.startswith(f"streamscope {argv[0]}: "), line
    return line


def run(*argv: str, prelude: str = "") -> subprocess.CompletedProcess[str]:
    """The real entry point in a fresh interpreter (`prelude` runs first)."""
    code = f"import sys\n{prelude}\nfrom streamscope.tools.cli import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)


# classify FILE: missing, directory, not JSON, not UTF-8, empty, JSON without a streamscope span.

@pytest.mark.parametrize(("name", "content", "expect"), [
    ("nope.json", None, "no such file"),
    ("garbage.json", "{not json", "not JSON at line 1"),
    ("binary.json", b"\xff\xfe\x00", "not UTF-8"),
    ("empty.json", "", "is empty"),
    ("blank.json", "\n \n", "is empty"),
    ("other.json", '{"a": 1}', "no streamscope span in it (1 span record"),
    ("list.json", "[1, 2]", "no streamscope span in it"),
    ("later.jsonl", '{"streamscope.class": "complete"}\n{"a": 1\n', "not JSON at line 2"),
])
def test_classify_bad_files(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str,
                            content: str | bytes | None, expect: str) -> None:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    line = usage_error(capsys, "classify", str(path))
    assert str(path) in line and expect in line
    assert all(f in line for f in FORMATS)


def test_classify_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = usage_error(capsys, "classify", str(tmp_path))
    assert "is a directory" in line and str(tmp_path) in line


def test_classify_names_its_formats_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "classify", "--help")
    assert code == 0 and all(f in " ".join(out.split()) for f in FORMATS)


def test_classify_skips_and_counts_other_spans(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "mixed.jsonl"
    lines = [{"streamscope.class": "truncated", "streamscope.stop_reason": "max_tokens",
              "gen_ai.response.finish_reasons": ["length"]},
             {"http.request.method": "GET"}, {"gen_ai.system": "openai"}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    code, out, err = cli(capsys, "classify", str(path))
    assert (code, err) == (0, "")
    assert "1 streamed calls" in out and "truncated" in out and "skipped 2 span(s)" in out


def test_classify_disagreement_is_a_finding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"streamscope.class": "complete", "error.type": "overloaded_error"}) + "\n")
    code, out, _ = cli(capsys, "classify", str(path))
    assert code == 1 and "different live label" in out


@pytest.fixture
def exported(sim, telemetry: Telemetry, tmp_path: Path) -> tuple[Path, Path, Telemetry]:
    """The same real spans, printed by opentelemetry-sdk's ConsoleSpanExporter and as OTLP JSON,
    with one span of another instrumentation among them."""
    console = tmp_path / "console.txt"
    with console.open("w") as out:
        telemetry.provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=out)))
        for scenario in ("complete", "truncated", "refused", "inband_error", "cut_connection"):
            try:
                for _ in client(sim, scenario).messages.create(model="m", max_tokens=1024, messages=USER,
                                                               stream=True):
                    pass
            except Exception:
                pass
        telemetry.provider.get_tracer("another.instrumentation").start_span(
            "GET /health", attributes={"http.request.method": "GET"}).end()
    otlp = tmp_path / "spans.otlp.json"
    otlp.write_text(MessageToJson(encode_spans(telemetry.all_spans())))
    return console, otlp, telemetry


def test_classify_reads_the_console_exporters_output(exported: tuple[Path, Path, Telemetry],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    console, otlp, telemetry = exported
    text = console.read_text()
    assert text.count('\n    "resource": ') == 6 and text.startswith("{\n")  # pretty-printed, one object per span
    from_console, from_otlp = read_spans(console), read_spans(otlp)
    live = Counter(str((s.attributes or {})["streamscope.class"]) for s in telemetry.spans())
    assert Counter(classify(a) for a in from_console.spans) == Counter(classify(a) for a in from_otlp.spans) == live
    assert from_console.skipped == from_otlp.skipped == 1
    code, out, err = cli(capsys, "classify", str(console))
    assert (code, err) == (0, "")
    assert "5 streamed calls" in out and "skipped 1 span(s)" in out
    assert all(label in out for label in live)


# suggest: URLs, servers that are not there or not Prometheus, span files, numbers, output paths.

@pytest.fixture
def not_prometheus() -> Iterator[str]:
    """An HTTP server: 404 under /missing, HTML under /html, JSON that is no query result under /json,
    and under /refuses Prometheus's own error response to a query it cannot run."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = {"/html": (200, b"<html>hello</html>"), "/json": (200, b'{"hello": 1}'),
                            "/refuses": (400, b'{"status": "error", "errorType": "bad_data", "error": "parse error"}'),
                            }.get(self.path.split("/api/")[0], (404, b"not found"))
            self.send_response(status)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_suggest_unreachable_prometheus(capsys: pytest.CaptureFixture[str]) -> None:
    line = usage_error(capsys, "suggest", "--prometheus", "http://127.0.0.1:1")
    assert "cannot reach http://127.0.0.1:1" in line and "refused" in line


def test_suggest_url_without_scheme_means_http(capsys: pytest.CaptureFixture[str]) -> None:
    line = usage_error(capsys, "suggest", "--prometheus", "127.0.0.1:1")
    assert "cannot reach http://127.0.0.1:1" in line and "unknown url type" not in line


@pytest.mark.parametrize(("path", "expect"), [
    ("/missing", "answered HTTP 404 Not Found; is it a Prometheus server's base URL"),
    ("/html", "did not answer as Prometheus (Expecting value"),
    ("/json", "answered JSON that is not a Prometheus query result; is it a Prometheus server's base URL"),
    ("/refuses", "refused the query: HTTP 400: parse error"),
])
def test_suggest_server_that_is_not_prometheus(not_prometheus: str, capsys: pytest.CaptureFixture[str],
                                               path: str, expect: str) -> None:
    line = usage_error(capsys, "suggest", "--prometheus", not_prometheus + path)
    assert f"{not_prometheus}{path} {expect}" in line


@pytest.mark.parametrize(("argv", "expect"), [
    (["--prometheus", "ftp://host"], "argument --prometheus: expected an http:// or https:// URL"),
    (["--prometheus", "localhost:port"], "argument --prometheus: expected an http:// or https:// URL"),
    (["--prometheus", "http://127.0.0.1:1", "--window", "an hour"],
     "argument --window: expected a Prometheus duration"),
    (["--spans", "nope.jsonl"], "cannot read nope.jsonl: no such file"),
    (["--spans", "x", "--min-samples", "many"], "argument --min-samples: expected a whole number of samples >= 1"),
    (["--spans", "x", "--deadline", "inf"], "argument --deadline: expected a finite number of seconds > 0"),
    (["--spans", "x", "--deadline", "1e308"], "argument --deadline: expected a number of seconds > 0 and <= 1,000,000"),
    (["--spans", "x", "--output", "/nonexistent/b.toml"], "argument --output/-o: cannot write '/nonexistent/b.toml'"),
    ([], "one of the arguments --prometheus --spans is required"),
])
def test_suggest_bad_arguments(capsys: pytest.CaptureFixture[str], argv: list[str], expect: str) -> None:
    assert expect in usage_error(capsys, "suggest", *argv)


def test_suggest_reads_span_files_as_classify_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "other.json"
    path.write_text('{"a": 1}')
    assert "no streamscope span in it" in usage_error(capsys, "suggest", "--spans", str(path))


# check: every numeric option, text, infinities, NaN, zero, negatives, huge values.

@pytest.mark.parametrize(("value", "expect"), [
    ("ten", "argument --deadline: expected a number of seconds > 0, got 'ten'"),
    ("inf", "argument --deadline: expected a finite number of seconds > 0, got 'inf'"),
    ("nan", "argument --deadline: expected a finite number of seconds > 0, got 'nan'"),
    ("0", "argument --deadline: expected a number of seconds > 0, got '0'"),
    ("-1", "argument --deadline: expected a number of seconds > 0, got '-1'"),
    ("1e308", "argument --deadline: expected a number of seconds > 0 and <= 1,000,000, got '1e308'"),
])
def test_check_deadline(capsys: pytest.CaptureFixture[str], value: str, expect: str) -> None:
    assert expect in usage_error(capsys, "check", "--deadline", value)


@pytest.mark.parametrize("option", ["--deadline", "--reserve", "--decode-rate", "--answer-tokens", "--thinking-budget",
                                    "--retries", "--time-to-first-token", "--backoff-base", "--backoff-cap",
                                    "--ttft-p999", "--pool-size", "--rate", "--latency", "--slow-latency",
                                    "--input-tokens"])
@pytest.mark.parametrize("value", ["1e308", "inf", "-inf", "nan", "-1", "x", "99999999999999999999999999"])
def test_check_numbers_never_overflow(capsys: pytest.CaptureFixture[str], option: str, value: str) -> None:
    assert f"argument {option}: expected a " in usage_error(capsys, "check", f"{option}={value}")


def test_check_largest_accepted_values_finish(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["check", "--json", "--deadline", "1e6", "--reserve", "1e6", "--decode-rate", "1e6", "--answer-tokens",
            "1000000000", "--thinking-budget", "1000000000", "--retries", "1000", "--time-to-first-token", "1e6"]
    code, out, err = cli(capsys, *argv)
    assert (code, err) == (1, "") and json.loads(out)["verdict"] == "cannot finish"


# lab: the plot path and matplotlib, checked before the run; numbers; the model's own constraints.

@pytest.mark.parametrize(("target", "expect"), [
    ("/nonexistent/x.png", "cannot write '/nonexistent/x.png': directory '/nonexistent' does not exist"),
    ("{tmp}/dir.png", "cannot write '{tmp}/dir.png': it is a directory"),
    ("{tmp}/file.png/x.png", "cannot write '{tmp}/file.png/x.png': '{tmp}/file.png' is not a directory"),
    ("{tmp}/x.txt", "expected a file name ending in .png"),
])
def test_lab_plot_path_is_checked_before_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 target: str, expect: str) -> None:
    (tmp_path / "dir.png").mkdir()
    (tmp_path / "file.png").write_text("")
    line = usage_error(capsys, "lab", "--plot", target.format(tmp=tmp_path))
    assert f"argument --plot: {expect.format(tmp=tmp_path)}" in line


BLOCK_MATPLOTLIB = """
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "matplotlib":
            raise ModuleNotFoundError("No module named 'matplotlib'", name=name)
sys.meta_path.insert(0, Block())
"""


def test_lab_plot_without_matplotlib(tmp_path: Path) -> None:
    target = tmp_path / "lab.png"
    done = run("lab", "--plot", str(target), prelude=BLOCK_MATPLOTLIB)
    assert done.returncode == 2, done.stderr
    line = one_line(done.stderr)
    assert line.startswith("streamscope lab: --plot needs matplotlib") and "pip install 'streamscope[lab]'" in line
    assert done.stdout == "" and not target.exists()  # refused before the lab ran


@pytest.mark.parametrize(("argv", "expect"), [
    (["--horizon", "1e308"], "argument --horizon: expected a number of seconds >= 0 and <= 86,400"),
    (["--streams", "1e308"], "argument --streams: expected a whole number of requests >= 1"),
    (["--streams", "10000000"], "argument --streams: expected a whole number of requests >= 1 and <= 20,000"),
    (["--retries", "11"], "argument --retries: expected a whole number of retries >= 0 and <= 10"),
    (["--long-share", "nan"], "argument --long-share: expected a finite fraction >= 0"),
    (["--ping-every", "1e-300"], "argument --ping-every: expected 0 (no pings) or a number of seconds >= 0.1"),
    (["--total", "60,inf"], "argument --total: expected numbers of seconds > 0"),
    (["--deadline", "0"], "argument --deadline: expected a number of seconds > 0"),
    (["--retries", "1e308"], "argument --retries: expected a whole number of retries >= 0"),
    (["--thinking-min", "60", "--thinking-max", "50"], "need 0 < --thinking-min <= --thinking-max"),
    (["--pace-jitter", "1"], "--pace-jitter in [0, 1)"),
    (["--input-tokens", "-5"], "argument --input-tokens: expected a whole number of tokens >= 0, got '-5'"),
    (["--input-tokens", "1e308"], "argument --input-tokens: expected a whole number of tokens >= 0"),
    (["--input-tokens", "20000000"], "argument --input-tokens: expected a whole number of tokens >= 0 and <= "
                                     "10,000,000"),
    (["--decode-rate", "0"], "argument --decode-rate: expected a number of tokens per second >= 0.001, got '0'"),
    (["--decode-rate", "nan"], "argument --decode-rate: expected a finite number of tokens per second"),
    (["--decode-rate", "1e9"], "argument --decode-rate: expected a number of tokens per second >= 0.001 and <= "
                               "1,000,000"),
    (["--model", "gpt-sim"], "argument --model: no known price for 'gpt-sim'; give a model id the price table knows"),
])
def test_lab_bad_numbers(capsys: pytest.CaptureFixture[str], argv: list[str], expect: str) -> None:
    assert expect in usage_error(capsys, "lab", *argv)


# cli.main: the last resort, Ctrl-C, the exit codes in --help.

def test_an_unexpected_exception_is_one_line_and_exit_70(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import streamscope.tools.commands.check as command

    def broken(args: object) -> int:
        raise RuntimeError("something\nbroke")

    monkeypatch.setattr(command, "run", broken)
    monkeypatch.delenv("STREAMSCOPE_DEBUG", raising=False)
    code, _, err = cli(capsys, "check")
    assert code == 70
    assert one_line(err) == ("streamscope check: internal error: RuntimeError: something broke "
                             "(run with STREAMSCOPE_DEBUG=1 for the traceback)")
    monkeypatch.setenv("STREAMSCOPE_DEBUG", "1")
    code, _, err = cli(capsys, "check")
    assert code == 70 and "Traceback" in err


def test_ctrl_c_exits_130_without_a_traceback(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    import streamscope.tools.commands.lab as command

    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "run", interrupted)
    code, _, err = cli(capsys, "lab")
    assert code == 130 and one_line(err) == "streamscope lab: interrupted"


def test_the_real_entry_point_prints_one_line() -> None:
    done = run("check", "--deadline", "inf")
    assert done.returncode == 2 and done.stdout == ""
    assert "argument --deadline: expected a finite number of seconds > 0, got 'inf'" in one_line(done.stderr)


def test_help_documents_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "--help")
    assert code == 0
    for text in ("exit codes:", "0    done", "1    a finding", "2    usage error", "70   internal error",
                 "130  interrupted"):
        assert text in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "--version")
    assert (code, out) == (0, f"streamscope {__version__}\n")


HEAVY = ("anthropic", "opentelemetry.sdk", "starlette", "uvicorn", "matplotlib")


def test_help_imports_no_heavy_dependency() -> None:
    """`streamscope --help` and every `streamscope COMMAND --help` without the SDKs, servers or plots."""
    code = ("import sys\nfrom streamscope.tools.cli import build_parser\nparser = build_parser()\n"
            "for name in parser._subparsers._group_actions[0].choices.values(): name.format_help()\n"
            f"print(sorted(m for m in sys.modules if m.startswith({HEAVY!r})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# Defaults in every help text, in one form.

def subparsers() -> dict[str, argparse.ArgumentParser]:
    action: Any = build_parser()._subparsers._group_actions[0]  # type: ignore[union-attr]
    return dict(action.choices)


def test_every_default_is_shown_once_in_one_form() -> None:
    for name, parser in subparsers().items():
        formatter = Formatter(name)
        for action in parser._actions:
            shown = action.default is not None and action.default is not False and action.default != argparse.SUPPRESS
            if action.option_strings and shown:
                text = formatter._get_help_string(action)
                assert text.count("default") == 1, (name, action.option_strings, text)
        assert "(default " not in " ".join(parser.format_help().split()), name


@pytest.mark.parametrize(("command", "expect"), [
    ("check", ["--deadline S the caller's deadline for the whole call, retries included (default: 30)",
               "(default: 10000)", "on top of the reserve (default: 0)"]),
    ("lab", ["(default: 60,120)", "(default: any)", "requests in the workload (default: 200)"]),
    ("suggest", ["(default: 1h)", "(default: 20)", "(default: stdout)"]),
    ("demo", ["(default: 7)"]),
])
def test_defaults_in_help(capsys: pytest.CaptureFixture[str], command: str, expect: list[str]) -> None:
    code, out, _ = cli(capsys, command, "--help")
    text = " ".join(out.split())
    assert code == 0 and all(e in text for e in expect), text
