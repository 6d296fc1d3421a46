"""Model ids as the clouds write them, reduced to the maker's own id so one price answers for all.

Bedrock writes `anthropic.claude-sonnet-4-5-20250929-v1:0`, with a cross-region prefix
(`us.`, `eu.`, `apac.`, `global.`, ...) or inside an ARN; Vertex writes `claude-sonnet-4-5@20250929`;
Foundry and the first-party APIs write `claude-sonnet-4-5-20250929`, OpenAI `gpt-4o-2024-08-06`.
The price table knows the maker's ids (and some dated ones), so a dated id it does not list is
tried again without its date.
"""

from __future__ import annotations

import re

__all__ = ["cloud_id", "maker_of", "normalize_model", "undated"]

_BEDROCK_PREFIX = re.compile(r"^(?:(?:us|us-gov|eu|apac|au|jp|ca|in|global)\.)?anthropic\.")
_BEDROCK_VERSION = re.compile(r"-v\d+(?::\d+)?$")
_VERTEX_DATE = re.compile(r"@(\d{8})$")
_DATE = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2}|latest)$")
_OPENAI = re.compile(r"^(?:gpt-|chatgpt-|o\d|codex-|computer-use-)")


def cloud_id(model: str) -> str:
    """The id as the cloud's own price list spells it: lower case, an ARN or a `vendor/` path
    reduced to its last part (`arn:aws:bedrock:...:inference-profile/us.anthropic.claude-...`)."""
    return model.strip().lower().rpartition("/")[2]


def normalize_model(model: str) -> str:
    """The maker's id of `model`: Bedrock's prefixes and version suffix dropped, Vertex's `@date`
    written as the API's `-date`, e.g. `us.anthropic.claude-sonnet-4-5-20250929-v1:0` and
    `claude-sonnet-4-5@20250929` → `claude-sonnet-4-5-20250929`."""
    found = cloud_id(model)
    if "anthropic." in found:
        found = _BEDROCK_VERSION.sub("", _BEDROCK_PREFIX.sub("", found))
    if "@" in found:
        found = _VERTEX_DATE.sub(r"-\1", found).partition("@")[0]
    return found


def undated(model: str) -> str:
    """`model` without a trailing release date or `-latest` (`gpt-4.1-2025-04-14` → `gpt-4.1`)."""
    return _DATE.sub("", model)


def maker_of(model: str) -> str | None:
    """Whose model a normalized id names (the price table's provider id), or None: a model of
    anyone else (a self-hosted one behind an OpenAI-compatible endpoint) is never priced at a
    maker's rates by a guess."""
    if model.startswith("claude"):
        return "anthropic"
    if _OPENAI.match(model):
        return "openai"
    return None
