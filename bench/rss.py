"""Benchmark (not a test): the resident memory of an idle `messageweave serve`.

    .venv/bin/python -m bench.rss --settle-s 5

Starts the real peers (embedded Redis, Cyrus, the Bot API emulator), a real `messageweave serve`
process on that Redis, configures it for Cyrus and the emulator over its own admin API and
switches it on. Then, with no traffic, it waits `--settle-s` and samples the process's VmRSS
(`/proc/{pid}/status`) every 100 ms for `--sample-s`; prints one line with the last and the
highest sample.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

import httpx
from bench.peers import started_peers
from tests.conftest import serve_process
from tests.served import configure, peer_wire


def serve_pid() -> int:
    """Our child `messageweave serve` (`serve_process` does not expose its pid)."""
    me = str(os.getpid())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if ppid == me and b"serve" in argv:
            return int(entry.name)
    raise RuntimeError("no `messageweave serve` child found")


def rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0])


async def run(settle_s: float, sample_s: float) -> None:
    with started_peers("mwr") as peers:
        async with serve_process(peers.redis_url) as served:
            pid = serve_pid()
            async with httpx.AsyncClient(base_url=served.url) as http:
                await configure(http, peer_wire(peers.cyrus, peers.emulator))
            await asyncio.sleep(settle_s)
            samples: list[int] = []
            end = time.monotonic() + sample_s
            while time.monotonic() < end:
                samples.append(rss_kib(pid))
                await asyncio.sleep(0.1)
            print(f"idle messageweave serve (configured, enabled, no traffic): "
                  f"RSS {samples[-1] / 1024:.1f} MB, highest {max(samples) / 1024:.1f} MB "
                  f"over {sample_s:.0f} s after {settle_s:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--settle-s", type=float, default=5.0)
    parser.add_argument("--sample-s", type=float, default=3.0)
    args = parser.parse_args()
    asyncio.run(run(args.settle_s, args.sample_s))


if __name__ == "__main__":
    main()
