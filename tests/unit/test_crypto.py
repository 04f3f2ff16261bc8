import json
import os

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from messageweave.config.crypto import AAD, DecryptionError, decrypt, encrypt

KEY = bytes.fromhex("11" * 32)


def test_format_is_v1_hex_nonce_hex_ciphertext_and_tag() -> None:
    stored = encrypt(KEY, b'{"a":1}')
    prefix, nonce, sealed = stored.split(":")
    assert prefix == "v1"
    assert len(bytes.fromhex(nonce)) == 12 and nonce == nonce.lower()
    assert len(bytes.fromhex(sealed)) == len(b'{"a":1}') + 16
    # Anyone holding the key can read it with the documented parameters.
    assert AESGCM(KEY).decrypt(bytes.fromhex(nonce), bytes.fromhex(sealed), AAD) == b'{"a":1}'


def test_decrypts_a_value_written_with_the_documented_format() -> None:
    nonce = os.urandom(12)
    plain = json.dumps({"bot_token": "x"}).encode()
    sealed = AESGCM(KEY).encrypt(nonce, plain, b"message-weave/config:business/v1")
    assert decrypt(KEY, f"v1:{nonce.hex()}:{sealed.hex()}") == plain


def test_every_encryption_uses_a_fresh_nonce() -> None:
    assert encrypt(KEY, b"same") != encrypt(KEY, b"same")


@pytest.mark.parametrize("mangle", [
    lambda s: "v2" + s[2:],
    lambda s: s + ":extra",
    lambda s: s.replace("v1:", "v1:00", 1),
    lambda s: s[:-1],
    lambda s: s[:-2] + ("00" if not s.endswith("00") else "11"),
    lambda s: "garbage",
])
def test_tampered_or_malformed_values_are_rejected(mangle: object) -> None:
    stored = encrypt(KEY, b"secret")
    with pytest.raises(DecryptionError):
        decrypt(KEY, mangle(stored))  # type: ignore[operator]


def test_wrong_key_or_other_purpose_is_rejected() -> None:
    stored = encrypt(KEY, b"secret")
    with pytest.raises(DecryptionError):
        decrypt(bytes.fromhex("22" * 32), stored)
    with pytest.raises(DecryptionError):
        decrypt(KEY, stored, aad=b"another purpose")
