from collections.abc import Sequence

def tally(
    values: list[float], boundaries: Sequence[float], start: int, total: float, /
) -> tuple[list[int], float, float, float]: ...
