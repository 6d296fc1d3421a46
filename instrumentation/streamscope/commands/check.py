"""`streamscope check` (not yet built)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    print("streamscope check: not built yet")
    return 2
