"""streamscope.pricing: costs computed by hand from the providers' published rates, the usage
conventions (cache counts priced apart, never twice), the cloud ids, the user's overrides."""

from __future__ import annotations

import logging
import subprocess
import sys
import tomllib
from datetime import UTC, date, datetime

import genai_prices
import pytest

from streamscope.pricing import (
    PriceTable,
    Usage,
    check_prices,
    cost,
    merge_prices,
    normalize_model,
    prices_from_toml,
    shipped_rates,
)

M = 1_000_000
K = 100_000
"""A round count below the 200k-input threshold of the long-context rates."""

# The providers' published list prices, US dollars per million tokens (anthropic.com/pricing,
# openai.com/api/pricing): input, output, 5-minute cache write, 1-hour cache write, cache read.
PUBLISHED = {
    "claude-sonnet-4-5-20250929": (3.00, 15.00, 3.75, 6.00, 0.30),
    "claude-haiku-4-5-20251001": (1.00, 5.00, 1.25, 2.00, 0.10),
    "claude-opus-4-1-20250805": (15.00, 75.00, 18.75, 30.00, 1.50),
    "claude-opus-4-5-20251101": (5.00, 25.00, 6.25, 10.00, 0.50),
}
# OpenAI: input, output, cached input (no cache-write charge).
PUBLISHED_OPENAI = {
    "gpt-4o-2024-08-06": (2.50, 10.00, 1.25),
    "gpt-4.1-2025-04-14": (2.00, 8.00, 0.50),
    "gpt-4.1-mini": (0.40, 1.60, 0.10),
    "o3": (2.00, 8.00, 0.50),
    "o4-mini": (1.10, 4.40, 0.275),
}
SONNET_45_LONG = (6.00, 22.50, 7.50, 12.00, 0.60)
"""Claude Sonnet 4.5 above 200k input tokens (cache reads and writes counted): every token at these."""


def by_hand_anthropic(rates: tuple[float, ...], fresh: int, out: int, w5: int, w1: int, read: int) -> float:
    i, o, c5, c1, r = rates
    return (fresh * i + out * o + w5 * c5 + w1 * c1 + read * r) / M


# -- published rates ------------------------------------------------------------------------------


SPLIT = {"ephemeral_5m_input_tokens": 2_000, "ephemeral_1h_input_tokens": 1_000}


@pytest.mark.parametrize("model", list(PUBLISHED))
def test_claude_costs_match_the_published_rates(model: str) -> None:
    usage = Usage.from_anthropic(input_tokens=1_200, output_tokens=850, cache_read_input_tokens=20_000,
                                 cache_creation_input_tokens=3_000, cache_creation=SPLIT)
    assert usage.input == 1_200 + 20_000 + 3_000  # Anthropic's input_tokens leaves the cache out
    expected = by_hand_anthropic(PUBLISHED[model], fresh=1_200, out=850, w5=2_000, w1=1_000, read=20_000)
    assert cost("anthropic", model, usage) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("model", list(PUBLISHED_OPENAI))
def test_openai_costs_match_the_published_rates_cached_tokens_counted_once(model: str) -> None:
    i, o, cached = PUBLISHED_OPENAI[model]
    chat = Usage.from_openai_chat(prompt_tokens=10_000, completion_tokens=2_000,
                                  prompt_tokens_details={"cached_tokens": 8_000},
                                  completion_tokens_details={"reasoning_tokens": 1_500})
    # prompt_tokens include the 8000 cached ones, completion_tokens the 1500 reasoning ones.
    expected = (2_000 * i + 8_000 * cached + 2_000 * o) / M
    assert cost("openai", model, chat) == pytest.approx(expected, rel=1e-9)
    responses = Usage.from_openai_responses(input_tokens=10_000, output_tokens=2_000,
                                            input_tokens_details={"cached_tokens": 8_000},
                                            output_tokens_details={"reasoning_tokens": 1_500})
    assert responses == chat
    assert cost("openai", model, responses) == pytest.approx(expected, rel=1e-9)


def test_sonnet_45_long_context_rates_apply_to_every_token_above_200k_input() -> None:
    # 150k fresh + 60k read = 210k input: over the threshold although the fresh input alone is not.
    usage = Usage.from_anthropic(input_tokens=150_000, output_tokens=4_000, cache_read_input_tokens=60_000,
                                 cache_creation_input_tokens=0)
    expected = by_hand_anthropic(SONNET_45_LONG, fresh=150_000, out=4_000, w5=0, w1=0, read=60_000)
    assert cost("anthropic", "claude-sonnet-4-5", usage) == pytest.approx(expected, rel=1e-9)
    at_threshold = Usage.from_anthropic(input_tokens=200_000, output_tokens=10)
    assert cost("anthropic", "claude-sonnet-4-5", at_threshold) == pytest.approx((200_000 * 3 + 10 * 15) / M)


def test_cache_writes_without_the_split_are_five_minute_writes() -> None:
    usage = Usage.from_anthropic(input_tokens=100, output_tokens=10, cache_creation_input_tokens=4_000)
    assert (usage.cache_write_5m, usage.cache_write_1h, usage.input) == (4_000, 0, 4_100)
    expected = by_hand_anthropic(PUBLISHED["claude-haiku-4-5-20251001"], fresh=100, out=10, w5=4_000, w1=0, read=0)
    assert cost("anthropic", "claude-haiku-4-5-20251001", usage) == pytest.approx(expected)


def test_one_hour_writes_cost_more_than_five_minute_writes() -> None:
    five = Usage.from_anthropic(0, 0, cache_creation={"ephemeral_5m_input_tokens": M, "ephemeral_1h_input_tokens": 0})
    hour = Usage.from_anthropic(0, 0, cache_creation={"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": M})
    assert cost("anthropic", "claude-opus-4-1", five) == pytest.approx(18.75)
    assert cost("anthropic", "claude-opus-4-1", hour) == pytest.approx(30.0)


def test_web_search_requests_are_billed_per_request() -> None:
    usage = Usage.from_anthropic(input_tokens=1_000, output_tokens=100, server_tool_use={"web_search_requests": 3})
    expected = (1_000 * 3 + 100 * 15) / M + 3 * 10 / 1_000  # $10 per 1000 searches
    assert cost("anthropic", "claude-sonnet-4-5", usage) == pytest.approx(expected)


def test_sdk_objects_read_like_dicts() -> None:
    from anthropic.types import CacheCreation, ServerToolUsage

    split = CacheCreation(ephemeral_5m_input_tokens=15, ephemeral_1h_input_tokens=25)
    usage = Usage.from_anthropic(10, 20, 30, 40, split, ServerToolUsage(web_search_requests=2, web_fetch_requests=0))
    assert usage == Usage(input=80, output=20, cache_read=30, cache_write_5m=15, cache_write_1h=25,
                          web_search_requests=2)


def test_the_recorders_fields_make_the_same_usage() -> None:
    anthropic = Usage.from_anthropic(1_000, 200, 300, 400, {"ephemeral_5m_input_tokens": 100,
                                                           "ephemeral_1h_input_tokens": 300})
    recorded = Usage.from_counts(input_tokens=1_700, output_tokens=200, cache_read=300, cache_write=400,
                                 cache_write_1h=300)
    assert recorded == anthropic
    assert Usage.from_counts(None, None) == Usage()


@pytest.mark.parametrize(("model", "usage"), [
    ("claude-sonnet-4-5", Usage(input=250_000, output=3_000, cache_read=40_000, cache_write_5m=5_000,
                                cache_write_1h=7_000)),
    ("claude-haiku-4-5", Usage(input=9_000, output=700, cache_read=1_000, cache_write_5m=2_000, cache_write_1h=3_000)),
    ("claude-opus-4-5", Usage(input=9_000, output=700, cache_read=1_000, cache_write_5m=2_000, cache_write_1h=3_000)),
    ("gpt-4o", Usage(input=9_000, output=700, cache_read=4_000, reasoning=100)),
    ("o4-mini", Usage(input=9_000, output=700, cache_read=4_000, reasoning=500)),
])
def test_the_arithmetic_agrees_with_the_librarys_own(model: str, usage: Usage) -> None:
    """The rates are read from genai-prices and multiplied here (~2 µs, not its ~80 µs): its own
    calc_price must give the same answer."""
    theirs = genai_prices.Usage(input_tokens=usage.input, output_tokens=usage.output,
                                cache_read_tokens=usage.cache_read,
                                cache_write_tokens=usage.cache_write_5m + usage.cache_write_1h,
                                cache_write_1h_tokens=usage.cache_write_1h)
    provider = "anthropic" if model.startswith("claude") else "openai"
    expected = genai_prices.calc_price(theirs, model, provider_id=provider,
                                       genai_request_timestamp=datetime.now(UTC)).total_price
    assert cost(provider, model, usage) == pytest.approx(float(expected), rel=1e-9)


# -- cloud ids ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("model", "expected"), [
    ("anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5-20250929"),
    ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5-20250929"),
    ("global.anthropic.claude-opus-4-5-20251101-v1:0", "claude-opus-4-5-20251101"),
    ("arn:aws:bedrock:us-east-1:123456789012:inference-profile/eu.anthropic.claude-haiku-4-5-20251001-v1:0",
     "claude-haiku-4-5-20251001"),
    ("claude-sonnet-4-5@20250929", "claude-sonnet-4-5-20250929"),
    ("claude-3-5-sonnet-v2@20241022", "claude-3-5-sonnet-v2-20241022"),
    ("Claude-Sonnet-4-5", "claude-sonnet-4-5"),
    ("gpt-4o-2024-08-06", "gpt-4o-2024-08-06"),
])
def test_cloud_ids_normalize_to_the_makers_id(model: str, expected: str) -> None:
    assert normalize_model(model) == expected


USAGE = Usage.from_anthropic(input_tokens=5_000, output_tokens=1_000, cache_read_input_tokens=2_000,
                             cache_creation={"ephemeral_5m_input_tokens": 1_000, "ephemeral_1h_input_tokens": 500})


@pytest.mark.parametrize(("provider", "model"), [
    ("aws.bedrock", "anthropic.claude-opus-4-1-20250805-v1:0"),
    ("aws.bedrock", "us.anthropic.claude-opus-4-1-20250805-v1:0"),
    ("aws.bedrock", "global.anthropic.claude-sonnet-4-5-20250929-v1:0"),
    ("aws.bedrock", "arn:aws:bedrock:us-west-2:123456789012:inference-profile/"
                    "global.anthropic.claude-sonnet-4-5-20250929-v1:0"),
    ("gcp.vertex_ai", "claude-sonnet-4-5@20250929"),
    ("gcp.vertex_ai", "claude-opus-4-1@20250805"),
    ("azure.ai.inference", "claude-sonnet-4-5"),
])
def test_a_cloud_id_is_priced_like_the_first_party_id(provider: str, model: str) -> None:
    first_party = cost("anthropic", normalize_model(model), USAGE)
    assert first_party is not None
    # Bedrock reports no web searches (it has no web search tool); the rest is the same price.
    assert cost(provider, model, USAGE) == pytest.approx(first_party)


def test_bedrock_regional_endpoints_cost_ten_percent_more_for_the_newer_models() -> None:
    """AWS's published prices: for Claude Sonnet 4.5, Haiku 4.5 and later, an in-region or
    geographic (`us.`, `eu.`) endpoint costs 10% more than `global.` (= the first-party price)."""
    first_party = cost("anthropic", "claude-sonnet-4-5-20250929", USAGE)
    assert first_party is not None
    for model in ("anthropic.claude-sonnet-4-5-20250929-v1:0", "us.anthropic.claude-sonnet-4-5-20250929-v1:0"):
        assert cost("aws.bedrock", model, USAGE) == pytest.approx(first_party * 1.1)


def test_a_dated_id_the_table_does_not_list_is_priced_as_its_model() -> None:
    usage = Usage(input=M, output=M)
    assert cost("openai", "gpt-4.1-2099-01-01", usage) == pytest.approx(2 + 8)
    assert cost("openai", "gpt-4o-2024-05-13", usage) == pytest.approx(5 + 15)  # listed: its own price
    assert cost("azure.ai.openai", "gpt-4o", usage) == pytest.approx(2.5 + 10)


@pytest.mark.parametrize(("provider", "model"), [
    ("anthropic", "claude-nonexistent-9"), ("openai", "llama-3.1-70b-instruct"), ("openai", "my-finetune"),
    ("aws.bedrock", "us.anthropic.claude-nonexistent-9-v1:0"), ("something", "gpt-unknown"), ("openai", None),
    ("openai", ""),
])
def test_an_unknown_model_is_unpriced_never_zero(provider: str, model: str | None) -> None:
    assert cost(provider, model, Usage(input=1_000, output=1_000)) is None


def test_service_tier_variants() -> None:
    flex = shipped_rates("openai", "o3", {"service_tier": "flex"}, date(2026, 11, 1))
    assert flex is not None and flex.input is not None and flex.output is not None
    assert (flex.input.base, flex.output.base) == (1.0, 4.0)  # half the standard price


# -- overrides ------------------------------------------------------------------------------------


def test_the_longest_glob_wins_and_a_missing_key_falls_back_to_the_shipped_rate() -> None:
    table = PriceTable.configure({"claude-*": {"input": 1.0, "output": 2.0},
                                  "claude-sonnet-4-5*": {"input": 4.0}})
    usage = Usage(input=K, output=K, cache_read=K // 2)
    # Sonnet 4.5: input 4 from its glob; output 15 and cache read 0.30 from the shipped table.
    assert table.cost("anthropic", "claude-sonnet-4-5", usage) == pytest.approx((4 * 0.5 + 15 + 0.3 * 0.5) / 10)
    # Haiku 4.5: only "claude-*" matches; cache read from the shipped table (0.10).
    assert table.cost("anthropic", "claude-haiku-4-5", usage) == pytest.approx((1 * 0.5 + 2 + 0.1 * 0.5) / 10)
    # The shipped long-context tier still applies to the keys the override leaves out (output 22.50).
    assert table.cost("anthropic", "claude-sonnet-4-5", Usage(input=M, output=M)) == pytest.approx(4 + 22.5)


def test_a_glob_matches_the_cloud_ids_through_the_makers_id() -> None:
    table = PriceTable.configure({"claude-sonnet-4-5*": {"input": 4.0, "output": 20.0}})
    usage = Usage(input=M, output=M)
    assert table.cost("aws.bedrock", "us.anthropic.claude-sonnet-4-5-20250929-v1:0", usage) == pytest.approx(24)
    assert table.cost("gcp.vertex_ai", "claude-sonnet-4-5@20250929", usage) == pytest.approx(24)


def test_an_override_prices_a_model_the_table_lacks_only_with_input_and_output() -> None:
    table = PriceTable.configure({"my-model": {"input": 1.0, "output": 3.0}, "half-*": {"input": 1.0}})
    assert table.cost("openai", "my-model", Usage(input=M, output=M, cache_read=M)) == pytest.approx(3 + 1)
    assert table.cost("openai", "half-model", Usage(input=M, output=M)) is None


def test_the_api_merges_over_the_file_and_the_file_over_the_shipped_table() -> None:
    file = prices_from_toml(tomllib.loads('[prices."claude-sonnet-4-5*"]\ninput = 1.0\noutput = 2.0\n')["prices"])
    api = check_prices({"claude-sonnet-4-5*": {"output": 5.0}})
    assert merge_prices(file, api) == {"claude-sonnet-4-5*": {"input": 1.0, "output": 5.0}}
    table = PriceTable.configure({"claude-sonnet-4-5*": {"output": 5.0}},
                                 tomllib.loads('[prices."claude-sonnet-4-5*"]\ninput = 1.0\noutput = 2.0\n')["prices"])
    assert table.cost("anthropic", "claude-sonnet-4-5", Usage(input=K, output=K, cache_read=K)) == \
        pytest.approx((0 + 5 + 0.3) / 10)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "streamscope"]


def test_a_misspelt_key_is_one_warning_line_and_the_glob_is_ignored(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="streamscope"):
        table = PriceTable.configure({"claude-sonnet-4-5*": {"inputt": 3, "output": 1}})
    [line] = warnings_of(caplog)
    assert "claude-sonnet-4-5*" in line and "'inputt'" in line and "did you mean 'input'?" in line
    assert "ignored" in line and "\n" not in line
    assert table.overrides == []
    assert table.cost("anthropic", "claude-sonnet-4-5", Usage(input=K, output=K)) == pytest.approx((3 + 15) / 10)


@pytest.mark.parametrize("value", [-3, "3", True, float("nan"), float("inf"), None])
def test_a_bad_value_is_one_warning_line_and_the_glob_is_ignored(caplog: pytest.LogCaptureFixture,
                                                                 value: object) -> None:
    with caplog.at_level(logging.WARNING, logger="streamscope"):
        good = check_prices({"gpt-4o*": {"input": value, "output": 10}, "o3*": {"input": 1, "output": 2}})
    [line] = warnings_of(caplog)
    assert "gpt-4o*" in line and "input = " in line and "\n" not in line
    assert good == {"o3*": {"input": 1.0, "output": 2.0}}


def test_bad_shapes_are_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="streamscope"):
        assert check_prices(5) == {}
        assert check_prices({"gpt-4o": 3}) == {}
        # An unquoted TOML glob with a dot is a nested table: the warning says to quote it.
        assert prices_from_toml(tomllib.loads("[prices.gpt-4.1]\ninput = 1.0\n")["prices"]) == {}
    lines = warnings_of(caplog)
    assert len(lines) == 3
    assert "instrument(prices=...)" in lines[0] and "int" in lines[0]
    assert "prices['gpt-4o']" in lines[1] and "table of prices" in lines[1]
    assert "[prices.gpt-4]" in lines[2] and 'quote a glob with dots' in lines[2]


# -- cost of pricing ------------------------------------------------------------------------------


def test_importing_pricing_does_not_load_the_library() -> None:
    code = ("import sys, streamscope.pricing as p; assert 'genai_prices' not in sys.modules; "
            "p.cost('anthropic', 'claude-haiku-4-5', p.Usage(input=1, output=1)); "
            "assert 'genai_prices' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_table_resolves_a_model_once() -> None:
    table = PriceTable()
    first = table.rates("anthropic", "claude-haiku-4-5")
    assert first is not None and first.source == "anthropic:claude-haiku-4-5"
    assert table.rates("anthropic", "claude-haiku-4-5") is first
