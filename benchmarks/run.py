"""`make bench`: every benchmark, in order, with its defaults."""

from __future__ import annotations

import sys

import micro
import stream_cpu


def main() -> int:
    print("== micro: the per-event path alone ==")
    micro.main([])
    print()
    print("== stream_cpu: whole streams through the real SDK ==")
    stream_cpu.main([])
    return 0


if __name__ == "__main__":
    sys.exit(main())
