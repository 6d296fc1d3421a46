"""Exporters: write a finished record out (the span; the metrics)."""
