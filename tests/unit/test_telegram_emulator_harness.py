"""The emulator harness fails loudly, never skips, when Node.js or npm is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.peers import telegram as peer


def test_missing_node_is_an_error_that_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(peer.shutil, "which", lambda name: None)

    with pytest.raises(peer.EmulatorError, match=r"`node` is not on PATH.*Node\.js"):
        peer.TelegramEmulator.start(tmp_path)
