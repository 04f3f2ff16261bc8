"""Quiet spells for the delivery benches (issue #37): `--quiet LO:HI` spaces the events LO–HI
seconds apart at random (seeded, so two runs space their events alike)."""

from __future__ import annotations

import argparse
import random


def quiet_range(text: str) -> tuple[float, float]:
    """`LO:HI` seconds (argparse type)."""
    try:
        lo, hi = (float(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError("--quiet takes LO:HI seconds, e.g. 10:60") from None
    if not 0 < lo <= hi:
        raise argparse.ArgumentTypeError("--quiet needs 0 < LO <= HI")
    return lo, hi


def quiet_gaps(quiet: tuple[float, float], count: int, seed: int) -> list[float]:
    """`count` gaps (s), each drawn uniformly from the range."""
    rng = random.Random(seed)
    return [rng.uniform(*quiet) for _ in range(count)]


def add_quiet_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quiet", type=quiet_range, default=None, metavar="LO:HI",
        help="space the mails (and the chat's /help) LO-HI s apart at random instead of "
             "--spacing-ms: each one the first after a quiet spell. A run of 10 mails at "
             "10:60 takes about 6 minutes (and as long again for 10 chats)")
    parser.add_argument("--seed", type=int, default=37, help="the quiet spells' seed")
