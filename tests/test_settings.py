"""Flags, environment variables and their precedence."""

import pytest

from triode.settings import FLAGS, SettingsError, resolve


def test_defaults_match_the_seed_table():
    """Store flags default exactly as the seed's table says."""
    s = resolve({}, {})
    assert s.responses_store_max_entries == 1024
    assert s.responses_store_max_bytes == 268435456
    assert s.responses_store_ttl_secs == 3600
    assert s.responses_background_max_jobs == 64
    assert s.responses_background_ephemeral_ttl_secs == 600
    assert s.conversation_store_max_entries == 256
    assert s.conversation_store_max_bytes == 67108864
    assert s.conversation_store_ttl_secs == 3600
    assert s.reasoning_echo_max_bytes == 16 * 1024 * 1024
    assert (s.host, s.port, s.parallel) == ("127.0.0.1", 8080, 8)


@pytest.mark.parametrize("env,field,value", [
    ("LLAMA_ARG_RESPONSES_STORE_MAX_ENTRIES", "responses_store_max_entries", 7),
    ("MLXCEL_RESPONSES_STORE_MAX_BYTES", "responses_store_max_bytes", 99),
    ("LLAMA_ARG_RESPONSES_STORE_TTL_SECS", "responses_store_ttl_secs", 5),
    ("MLXCEL_RESPONSES_BACKGROUND_MAX_JOBS", "responses_background_max_jobs", 3),
    ("MLXCEL_RESPONSES_BACKGROUND_EPHEMERAL_TTL_SECS", "responses_background_ephemeral_ttl_secs", 9),
    ("LLAMA_ARG_CONVERSATION_STORE_MAX_ENTRIES", "conversation_store_max_entries", 4),
    ("MLXCEL_CONVERSATION_STORE_MAX_BYTES", "conversation_store_max_bytes", 123),
    ("LLAMA_ARG_CONVERSATION_STORE_TTL_SECS", "conversation_store_ttl_secs", 11),
    ("MLXCEL_REASONING_ECHO_MAX_BYTES", "reasoning_echo_max_bytes", 0),
    ("TRIODE_PARALLEL", "parallel", 2),
])
def test_seed_environment_names(env, field, value):
    """Each flag reads its exact environment variable name."""
    assert getattr(resolve({}, {env: str(value)}), field) == value


def test_precedence_cli_then_triode_env_then_seed_env():
    """The command line wins over TRIODE_*, which wins over the seed's names."""
    env = {"TRIODE_RESPONSES_STORE_TTL_SECS": "20", "LLAMA_ARG_RESPONSES_STORE_TTL_SECS": "30"}
    assert resolve({}, env).responses_store_ttl_secs == 20
    assert resolve({}, {"LLAMA_ARG_RESPONSES_STORE_TTL_SECS": "30"}).responses_store_ttl_secs == 30
    assert resolve({"responses_store_ttl_secs": 10}, env).responses_store_ttl_secs == 10


def test_every_flag_has_a_triode_variable():
    """TRIODE_<FLAG> exists for every flag."""
    for f in FLAGS:
        assert f.env_names[0] == "TRIODE_" + f.name.replace("-", "_").upper()


def test_ephemeral_ttl_zero_refuses_to_start():
    """--responses-background-ephemeral-ttl-secs 0 fails with a message naming the flag."""
    with pytest.raises(SettingsError, match="--responses-background-ephemeral-ttl-secs"):
        resolve({"responses_background_ephemeral_ttl_secs": 0}, {})


def test_bad_environment_value_names_the_variable():
    """A non-numeric environment value is an error naming the variable."""
    with pytest.raises(SettingsError, match="TRIODE_PORT"):
        resolve({}, {"TRIODE_PORT": "eighty"})


@pytest.mark.parametrize("seconds", [0.0, -1.0, float("nan")])
def test_write_timeout_must_be_positive(seconds):
    """--write-timeout 0 would cut every write: refused, naming the flag (once)."""
    with pytest.raises(SettingsError, match="--write-timeout must be more than 0") as raised:
        resolve({"write_timeout": seconds}, {})
    assert str(raised.value).count("--write-timeout") == 1


def test_write_timeout_just_above_zero_is_accepted():
    assert resolve({"write_timeout": 0.001}, {}).write_timeout == 0.001


@pytest.mark.parametrize("bits", [-1, 1, 3, 7, 16])
def test_kv_bits_other_than_0_4_8_are_refused(bits):
    with pytest.raises(SettingsError, match="--kv-bits must be 0, 4 or 8") as raised:
        resolve({"kv_bits": bits}, {})
    assert str(raised.value).count("--kv-bits") == 1


@pytest.mark.parametrize("bits", [0, 4, 8])
def test_kv_bits_0_4_8_are_accepted(bits):
    assert resolve({"kv_bits": bits}, {}).kv_bits == bits


@pytest.mark.parametrize("tokens", [0, 1, 2048, 100000])
def test_prefill_chunk_is_0_for_auto_or_a_token_count(tokens):
    assert resolve({"prefill_chunk": tokens}, {}).prefill_chunk == tokens


def test_prefill_chunk_below_zero_is_refused():
    with pytest.raises(SettingsError, match="--prefill-chunk must be 0 or more"):
        resolve({"prefill_chunk": -1}, {})


@pytest.mark.parametrize("tokens", [0, 16, 512, 100000])
def test_attention_window_is_0_for_off_or_at_least_16(tokens):
    assert resolve({"attention_window": tokens}, {}).attention_window == tokens


@pytest.mark.parametrize("tokens", [-1, 1, 15])
def test_attention_window_below_16_is_refused(tokens):
    with pytest.raises(SettingsError, match="--attention-window must be 0 or at least 16") \
            as raised:
        resolve({"attention_window": tokens}, {})
    assert str(raised.value).count("--attention-window") == 1


def test_attention_window_with_kv_bits_is_refused():
    """The quantized batch cache does not rotate: the pair is refused, naming both."""
    with pytest.raises(SettingsError, match="--attention-window and --kv-bits cannot be "
                       "combined"):
        resolve({"attention_window": 512, "kv_bits": 8}, {})
    assert resolve({"attention_window": 512, "kv_bits": 0}, {}).attention_window == 512


def test_prompt_cache_dir_needs_the_prompt_cache():
    """The disk tier keeps what the memory tier evicts: with no memory tier, it is refused."""
    with pytest.raises(SettingsError, match="--prompt-cache-dir needs the prompt cache"):
        resolve({"prompt_cache_dir": "/tmp/kv", "prompt_cache_bytes": 0}, {})
    settings = resolve({"prompt_cache_dir": "/tmp/kv", "prompt_cache_bytes": 1}, {})
    assert settings.prompt_cache_disk_bytes == 8 * 1024 ** 3


def test_prompt_cache_disk_bytes_below_zero_is_refused():
    with pytest.raises(SettingsError, match="--prompt-cache-disk-bytes must be 0 or more"):
        resolve({"prompt_cache_disk_bytes": -1}, {})


def test_model_repeats_on_the_command_line_and_in_the_environment():
    import argparse

    from triode.settings import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--model", "a", "--model", "b", "--no-autoload"])
    s = resolve(vars(args), {})
    assert s.model == ("a", "b") and s.no_autoload is True
    assert resolve({}, {"TRIODE_MODEL": "x, y", "TRIODE_NO_AUTOLOAD": "true"}).model == ("x", "y")
    assert resolve({}, {}).model == () and resolve({}, {}).no_autoload is False
    with pytest.raises(SettingsError, match="TRIODE_NO_AUTOLOAD"):
        resolve({}, {"TRIODE_NO_AUTOLOAD": "maybe"})


@pytest.mark.parametrize("value,seconds", [("300", 300.0), ("5m", 300.0), ("1h30m", 5400.0),
                                           ("45s", 45.0), ("0", 0.0), ("-1", -1.0),
                                           ("-5m", -1.0), (2.5, 2.5)])
def test_keep_alive_reads_seconds_and_durations(value, seconds):
    from triode.settings import parse_keep_alive

    assert parse_keep_alive(value) == seconds


@pytest.mark.parametrize("value", ["soon", "", "5x", "m", "nan"])
def test_a_keep_alive_it_cannot_read_is_refused_naming_the_flag(value):
    with pytest.raises(SettingsError, match="--keep-alive"):
        resolve({"keep_alive": value}, {})


@pytest.mark.parametrize("field,value,message", [
    ("mcp_timeout", 0.0, "--mcp-timeout must be more than 0"),
    ("mcp_timeout", float("nan"), "--mcp-timeout must be more than 0"),
    ("mcp_max_calls", 0, "--mcp-max-calls must be at least 1"),
    ("mcp_max_output_bytes", 0, "--mcp-max-output-bytes must be at least 1"),
    ("mcp_idle", -1.0, "--mcp-idle must be 0 or more"),
])
def test_mcp_limits_below_their_floor_are_refused(field, value, message):
    with pytest.raises(SettingsError, match=message):
        resolve({field: value}, {})


@pytest.mark.parametrize("field,value", [("mcp_timeout", 0.001), ("mcp_max_calls", 1),
                                         ("mcp_max_output_bytes", 1), ("mcp_idle", 0.0)])
def test_mcp_limits_at_their_floor_are_accepted(field, value):
    assert getattr(resolve({field: value}, {}), field) == value


@pytest.mark.parametrize("seconds, ok", [(0.001, True), (60, True), (0, False), (-1, False)])
def test_the_distributed_watchdog_must_be_positive(seconds, ok):
    flags = {"distributed": "pipeline", "distributed_watchdog": seconds}
    if ok:
        assert resolve(flags, {}).distributed_watchdog == seconds
    else:
        with pytest.raises(SettingsError, match="--distributed-watchdog must be more than 0"):
            resolve(flags, {})


def test_distributed_refuses_what_it_cannot_keep_in_step_naming_each_flag():
    with pytest.raises(SettingsError) as refused:
        resolve({"distributed": "tensor", "kv_bits": 8, "prompt_cache_dir": "/tmp/x",
                  "models_dir": "/tmp"}, {})
    for flag in ("--kv-bits", "--prompt-cache-dir", "serves one model"):
        assert flag in str(refused.value)
    assert resolve({"distributed": "tensor", "attention_window": 64}, {}).attention_window
