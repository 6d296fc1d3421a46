"""The examples a new user copies run as written: the README's budget try-out against the local
simulator, and docs/simulator.md's own scripts (each played through the real SDK)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_the_readme_simulator_example_shows_a_stall_caught_by_idle() -> None:
    (example,) = [b for b in python_blocks(ROOT / "README.md") if "Simulator" in b]
    done = run(example)
    assert done.returncode == 0, done.stderr
    assert "idle budget fired; partial answer: True" in done.stdout
    assert '"streamscope.class": "stalled_mid_stream"' in done.stdout
    assert "Traceback" not in done.stderr


def test_the_simulator_docs_scripts_play_through_the_sdk() -> None:
    (scripts,) = [b for b in python_blocks(ROOT / "docs" / "simulator.md") if "slow_thinker" in b]
    play = scripts.replace("    ...", """    import anthropic
    for name in ("slow_thinker", "stall_after_text", "search", "retry_me"):
        client = anthropic.Anthropic(base_url=sim.url(name), api_key="test", max_retries=1)
        with client.messages.stream(model="m", max_tokens=64, messages=[{"role": "user", "content": "x"}]) as s:
            print(name, repr(s.get_final_text()))""")
    done = run(play)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["slow_thinker 'The answer is 42.'", "stall_after_text 'Streams fail quietly.'",
                                        "search 'Searching.Found it.'", "retry_me 'ok'"]
