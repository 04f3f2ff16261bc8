import pytest

from messageweave.api.throttle import ClientAddressPolicy
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
    token = "t" * 32  # the shortest DEBUG_TOKEN accepted (issue #23)
    assert not from_env({"DEBUG_ENABLED": "1"}).debug_enabled  # no token
    assert from_env({"DEBUG_ENABLED": "1", "DEBUG_TOKEN": token}).debug_enabled
    assert from_env({"DEBUG_TOKEN": token}, debug_flag=True).debug_enabled
    assert not from_env({"DEBUG_TOKEN": token}).debug_enabled
    short = from_env({"DEBUG_ENABLED": "1", "DEBUG_TOKEN": token[:-1]})
    assert not short.debug_enabled
    assert short.debug_refusal == ("the debug surface stays off: DEBUG_TOKEN has 31 characters, "
                                   "at least 32 are needed")
    assert from_env({"DEBUG_ENABLED": "1"}).debug_refusal == (
        "the debug surface stays off: DEBUG_TOKEN is not set")
    assert from_env({"DEBUG_TOKEN": "t"}).debug_refusal is None  # not requested: nothing to say


def test_settings_repr_hides_the_admin_key() -> None:
    s = from_env({"REDIS_URL": "redis://x", "CONFIG_ENCRYPTION_KEY": KEY, "DEBUG_TOKEN": "dtok"})
    assert KEY not in repr(s) and "dtok" not in repr(s)


# ------------------------------------------------- TRUSTED_PROXY_HEADER, TRUSTED_PROXIES (§3.4)


def test_no_client_address_header_is_trusted_by_default() -> None:
    """Catches a default that believes a header: anyone reaching the backend directly could
    then pick a new address for every guess."""
    s = from_env({})
    assert (s.trusted_proxy_header, s.trusted_proxies) == ("", "")
    assert from_env({"TRUSTED_PROXY_HEADER": "  ", "TRUSTED_PROXIES": " , "}) == s
    policy = ClientAddressPolicy.parse(s.trusted_proxy_header, s.trusted_proxies)
    assert policy == ClientAddressPolicy()


def test_the_trusted_header_and_proxies_are_read_and_normalised() -> None:
    """Catches a header name compared case-sensitively (Starlette's are lowercase) and
    networks kept as typed (`10.1.2.3/8` must mean 10.0.0.0/8, a bare address its /32)."""
    s = from_env({"TRUSTED_PROXY_HEADER": " X-MW-Client-IP ",
                  "TRUSTED_PROXIES": " 10.1.2.3/8, 192.0.2.7 ,2001:DB8::/32,"})
    assert s.trusted_proxy_header == "x-mw-client-ip"
    assert s.trusted_proxies == "10.0.0.0/8,192.0.2.7/32,2001:db8::/32"
    policy = ClientAddressPolicy.parse(s.trusted_proxy_header, s.trusted_proxies)
    assert policy.header == "x-mw-client-ip"
    assert [str(n) for n in policy.proxies] == ["10.0.0.0/8", "192.0.2.7/32", "2001:db8::/32"]
    any_peer = from_env({"TRUSTED_PROXY_HEADER": "x-mw-client-ip"})
    assert (any_peer.trusted_proxy_header, any_peer.trusted_proxies) == ("x-mw-client-ip", "")


@pytest.mark.parametrize(("env", "message"), [
    ({"TRUSTED_PROXY_HEADER": "x mw client ip"}, "TRUSTED_PROXY_HEADER must be an HTTP header"),
    ({"TRUSTED_PROXY_HEADER": "x-mw-client-ip:"}, "TRUSTED_PROXY_HEADER must be an HTTP header"),
    ({"TRUSTED_PROXY_HEADER": "x-mw-client-ip", "TRUSTED_PROXIES": "10.0.0.0/8,gateway"},
     "TRUSTED_PROXIES must be comma-separated IP addresses or CIDR networks"),
    ({"TRUSTED_PROXY_HEADER": "x-mw-client-ip", "TRUSTED_PROXIES": "10.0.0.0/33"},
     "got '10.0.0.0/33'"),
    ({"TRUSTED_PROXY_HEADER": "x-mw-client-ip", "TRUSTED_PROXIES": "10.0.0.1 10.0.0.2"},
     "TRUSTED_PROXIES must be"),
    ({"TRUSTED_PROXIES": "10.0.0.0/8"}, "TRUSTED_PROXIES is set but TRUSTED_PROXY_HEADER is not"),
])
def test_a_malformed_trust_setting_is_an_error_naming_the_variable(
    env: dict[str, str], message: str
) -> None:
    """Catches a typo silently widening or dropping the trust: a proxy list that lost an entry
    (or became "any peer") would believe the header from clients, or count everyone as the
    gateway; and a proxy list without a header, which would do nothing the operator meant."""
    with pytest.raises(ValueError, match=message):
        from_env(env)
