"""AES-256-GCM at rest in the exact format `v1:<hex nonce>:<hex ciphertext+tag>`.

The additional authenticated data binds a ciphertext to its purpose, so a value copied into
another key does not decrypt there.
"""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

AAD = b"message-weave/config:business/v1"
_PREFIX = "v1"
_NONCE_BYTES = 12


class DecryptionError(Exception):
    """The stored value is not a v1 ciphertext for this key (never says more than that)."""


def encrypt(key: bytes, plaintext: bytes, aad: bytes = AAD) -> str:
    nonce = os.urandom(_NONCE_BYTES)
    sealed = AESGCM(key).encrypt(nonce, plaintext, aad)
    return f"{_PREFIX}:{nonce.hex()}:{sealed.hex()}"


def decrypt(key: bytes, stored: str, aad: bytes = AAD) -> bytes:
    parts = stored.split(":")
    if len(parts) != 3 or parts[0] != _PREFIX:
        raise DecryptionError("unsupported ciphertext format")
    try:
        nonce = bytes.fromhex(parts[1])
        sealed = bytes.fromhex(parts[2])
    except ValueError as exc:
        raise DecryptionError("ciphertext is not hex") from exc
    if len(nonce) != _NONCE_BYTES:
        raise DecryptionError("nonce must be 12 bytes")
    try:
        return AESGCM(key).decrypt(nonce, sealed, aad)
    except InvalidTag as exc:
        raise DecryptionError("authentication failed") from exc
