from messageweave.settings import debug_surface_requested, from_env

KEY = "0f" * 32


def test_complete_environment_is_configured() -> None:
    s = from_env({"REDIS_URL": "redis://127.0.0.1:6379/0", "CONFIG_ENCRYPTION_KEY": KEY})
    assert s.configured and s.missing == [] and s.port == 8080
    assert s.encryption_key == bytes.fromhex(KEY)


def test_missing_variables_are_listed_in_order() -> None:
    assert from_env({}).missing == ["REDIS_URL", "CONFIG_ENCRYPTION_KEY"]
    assert from_env({"REDIS_URL": "  "}).missing == ["REDIS_URL", "CONFIG_ENCRYPTION_KEY"]


def test_a_key_that_is_not_64_hex_chars_counts_as_missing() -> None:
    for bad in ("0f" * 31, "0f" * 33, "zz" * 32, "0f" * 31 + "g0"):
        env = {"REDIS_URL": "redis://x", "CONFIG_ENCRYPTION_KEY": bad}
        assert from_env(env).missing == ["CONFIG_ENCRYPTION_KEY"]


def test_mixed_case_hex_key_is_accepted() -> None:
    env = {"REDIS_URL": "redis://x", "CONFIG_ENCRYPTION_KEY": "aB" * 32}
    assert from_env(env).configured


def test_port_comes_from_the_environment() -> None:
    assert from_env({"PORT": "9090"}).port == 9090


def test_debug_surface_needs_a_request_and_a_token() -> None:
    for value in ("1", "true", "TRUE", "True", "yes", "YES"):
        assert debug_surface_requested(False, {"DEBUG_ENABLED": value})
    for value in ("", "0", "false", "on", "Yes ", "y"):
        assert not debug_surface_requested(False, {"DEBUG_ENABLED": value})
    assert debug_surface_requested(True, {})
    assert not from_env({"DEBUG_ENABLED": "1"}).debug_enabled  # no token
    assert from_env({"DEBUG_ENABLED": "1", "DEBUG_TOKEN": "t"}).debug_enabled
    assert from_env({"DEBUG_TOKEN": "t"}, debug_flag=True).debug_enabled
    assert not from_env({"DEBUG_TOKEN": "t"}).debug_enabled


def test_settings_repr_hides_the_admin_key() -> None:
    s = from_env({"REDIS_URL": "redis://x", "CONFIG_ENCRYPTION_KEY": KEY, "DEBUG_TOKEN": "dtok"})
    assert KEY not in repr(s) and "dtok" not in repr(s)
