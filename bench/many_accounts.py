"""Benchmark (not a test): many accounts on one instance (issue #37 item 3). What an idle
account costs, and whether one account's new mail is slower beside many idle ones.

    .venv/bin/python -m bench.many_accounts --levels 1,50,100,200 --mails 30

One Dovecot 2.3 (its process limits raised for a few hundred IMAPS connections: Dovecot's own
default of 100 processes per service would refuse them first), one embedded Redis, the Bot API
emulator. For each level N (accounts on the instance, `default` included):

1. the accounts up to N exist: `acc001`…, each a Dovecot user of its own over IMAPS with its
   own chat, created over the admin API (`POST /api/accounts`) of a serve process that is then
   stopped;
2. a fresh `messageweave serve` (its own process) on that Redis, configured as
   `bench.account_series` says (the measured account `default`, IDLE on its INBOX, its floor
   beside it) with the intervals a new user gets (`reconcile_interval_s` 60,
   `audit_interval_s` 600; `--reconcile-s`, `--audit-s`), until its TCP connections to Dovecot
   stop growing (every account's first pass made) and `--settle-s` more;
3. `--idle-s` (30 s) of idle: the process's CPU (utime + stime from /proc, % of one core), its
   context switches (voluntary + involuntary, every thread: its wake-ups), Redis's commands and
   CPU over the same time (the bench's own reads taken out), then its RSS (VmRSS), threads,
   asyncio tasks by coroutine (`bench/probe/sitecustomize.py`, SIGUSR1), TCP connections to
   Dovecot, Redis clients and keys;
4. `--mails` new mails of `default` timed to the chat beside the floor (1,618 ms apart).

Prints one line per level, the growth per account between levels, and `SUMMARY many_accounts:`.
Each level's serve log is kept and its lines of the Redis pool's failures counted: the
instance's one Redis client has a pool of 100 connections, which each account's own catch-up
subscription (before `63c4e27`) and the bursts of every account's passes and audits at once ran
dry ("Too many connections") near 70 accounts, 50 once every account held its push
(docs/benchmarks.md); since `33b0898` a burst waits for a connection ("No connection available"
after 10 s in vain). `--redis-pool` raises the size. When making an account fails, the level is
measured with the accounts made and the run ends there.
The periodic passes are part of idle: with N accounts and a 60 s interval, N / 60 passes a
second; every account also holds its push (IDLE here: one more IMAP connection each).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import redis.asyncio as aioredis
from bench.account_series import Bench, Series, add_account, bench, dovecot_user, series
from bench.imap_delivery import PASSWORD, USER, Peers, Security, started_peers
from tests.peers.dovecot import DovecotServer, require_dovecot

PROBE = Path(__file__).parent / "probe"
CLK_TCK = os.sysconf("SC_CLK_TCK")
INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")
# Enough processes and clients for a few hundred IMAPS connections (each an imap-login proxy
# and an imap process in Dovecot's default high-security mode).
ROOMY = "default_process_limit = 2000\ndefault_client_limit = 10000\n"


class RoomyDovecot(DovecotServer):
    def _write_config(self, libexec: Path) -> None:
        super()._write_config(libexec)
        # Dovecot's own keep-alive of an IDLE connection ("OK Still here"), every 2 min: the
        # test harness's 2 s woke every idle account's IDLE connection (TLS read, parser) twice
        # in a few seconds, a cost no real server puts on the instance (before session 16 the
        # figures below carried it).
        text = self.conf.read_text().replace("imap_idle_notify_interval = 2 secs",
                                             "imap_idle_notify_interval = 2 mins")
        self.conf.write_text(text + ROOMY)


@contextlib.contextmanager
def roomy_dovecot() -> Iterator[tuple[DovecotServer, int, Security]]:
    require_dovecot()
    base = Path(tempfile.mkdtemp(prefix="mwm-dovecot-"))
    server = RoomyDovecot(base, users={USER: PASSWORD})
    try:
        server.start()
        yield server, server.ports.imaps, "tls"
    finally:
        warnings = _inotify_warnings(server.log)
        print(f"Dovecot's log: {warnings} line(s) of its inotify instance limit"
              + (" (its processes past the limit polled: a late IDLE notification)"
                 if warnings else ""), flush=True)
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


def _inotify_warnings(log: Path) -> int:
    text = log.read_text(errors="replace") if log.exists() else ""
    return sum(1 for line in text.splitlines() if "inotify" in line.lower())


def roomy_inotify(accounts: int, *, keep: bool = False) -> int:
    """The kernel's inotify instances per user (`fs.inotify.max_user_instances`), raised when
    too few and this process may (root). Every Dovecot imap process that idles takes one (all
    run as one user here); past the limit Dovecot logs a warning and that process notices new
    mail only by its `mailbox_idle_check_interval` poll, so its IDLE notification comes late:
    with Debian's default of 128, the 200-account row's delivery tail (+200 to +390 ms at p99)
    was that (session 17). Returns the limit in force."""
    wanted = 4 * accounts + 64  # 3 IDLE-capable connections per account, the floor's, margin
    limit = int(INOTIFY_INSTANCES.read_text())
    if limit < wanted:
        try:
            INOTIFY_INSTANCES.write_text(str(wanted))
            limit = wanted
        except OSError as exc:
            print(f"fs.inotify.max_user_instances is {limit}, fewer than {wanted} IMAP "
                  f"processes will want ({exc.strerror}): Dovecot's processes past it poll, "
                  "and the many-accounts delivery tail is theirs", flush=True)
    return limit


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)


def _status(pid: int, name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    return 0


def _switches(pid: int) -> int:
    """Voluntary and involuntary context switches of every thread of `pid`."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            for line in (task / "status").read_text().splitlines():
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    total += int(line.split()[1])
    return total


def _tcp_to(pid: int, port: int) -> int:
    out = subprocess.run(["ss", "-tnpH", "state", "established", f"( dport = :{port} )"],
                         capture_output=True, text=True, check=False).stdout
    return sum(1 for line in out.splitlines() if f"pid={pid}," in line)


def _tasks(pid: int, path: Path) -> dict[str, object]:
    before = path.stat().st_size if path.exists() else 0
    os.kill(pid, signal.SIGUSR1)
    for _ in range(50):
        time.sleep(0.1)
        if path.exists() and path.stat().st_size > before:
            return dict(json.loads(path.read_text().splitlines()[-1]))
    return {}


@dataclass
class Idle:
    accounts: int
    rss_kib: int
    cpu_pct: float
    switches_per_s: float
    redis_cmds_per_s: float
    redis_cpu_pct: float
    threads: int
    tasks: int
    tcp_to_dovecot: int
    redis_clients: int
    redis_keys: int
    top_tasks: dict[str, int]
    account_keys: list[str]  # the Redis keys of one account (`acc001`), its id as <id>
    redis_top: dict[str, float]  # Redis's commands per second over the idle time, by command


async def _redis_counters(redis: aioredis.Redis) -> tuple[int, float, dict[str, int]]:
    stats, cpu = await redis.info("stats"), await redis.info("cpu")
    calls = {name.removeprefix("cmdstat_"): int(v["calls"])
             for name, v in (await redis.info("commandstats")).items()}
    return (int(stats["total_commands_processed"]),
            float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), calls)


async def until_connected(b: Bench, others: int, limit_s: float = 180) -> int:
    """Until the serve process's connections to Dovecot are at least `others` and have not
    grown for 5 s (every account's first pass made); how many."""
    deadline, last, stable_since = time.monotonic() + limit_s, -1, time.monotonic()
    while time.monotonic() < deadline:
        now = _tcp_to(b.pid, b.peers.port)
        if now != last:
            last, stable_since = now, time.monotonic()
        elif now >= others and time.monotonic() - stable_since > 5:
            return now
        await asyncio.sleep(0.5)
    print(f"  the connections to Dovecot did not settle: {last} for {others} accounts")
    return last


async def idle(b: Bench, accounts: int, idle_s: float, tasks_file: Path) -> Idle:
    ticks, switched = _cpu_ticks(b.pid), _switches(b.pid)
    commands, redis_cpu, calls = await _redis_counters(b.redis)
    started = time.monotonic()
    await asyncio.sleep(idle_s)
    took = time.monotonic() - started
    ticks, switched = _cpu_ticks(b.pid) - ticks, _switches(b.pid) - switched
    commands_after, redis_cpu_after, calls_after = await _redis_counters(b.redis)
    per_s = {c: (n - calls.get(c, 0)) / took for c, n in calls_after.items()}
    found = await asyncio.to_thread(_tasks, b.pid, tasks_file)
    counted = found.get("tasks", {})
    assert isinstance(counted, dict)
    clients = await b.redis.info("clients")
    return Idle(
        accounts=accounts, rss_kib=_status(b.pid, "VmRSS"),
        cpu_pct=100 * ticks / CLK_TCK / took, switches_per_s=switched / took,
        redis_cmds_per_s=(commands_after - commands - 4) / took,  # our INFOs
        redis_cpu_pct=100 * (redis_cpu_after - redis_cpu) / took,
        threads=_status(b.pid, "Threads"), tasks=sum(counted.values()),
        tcp_to_dovecot=_tcp_to(b.pid, b.peers.port),
        redis_clients=int(clients["connected_clients"]) - 1,  # ours
        redis_keys=int(await b.redis.dbsize()),
        top_tasks=dict(list(counted.items())[:8]),
        account_keys=sorted([k.replace("acc001", "<id>")
                             async for k in b.redis.scan_iter("a:{acc001}:*")]),
        redis_top={c: round(v, 1) for c, v in sorted(per_s.items(), key=lambda cv: -cv[1])[:8]})


def _line(i: Idle, s: Series) -> str:
    return (f"{i.accounts} accounts: RSS {i.rss_kib / 1024:.1f} MB, idle CPU {i.cpu_pct:.2f} % "
            f"of a core, {i.switches_per_s:.0f} context switches/s, Redis {i.redis_cmds_per_s:.0f}"
            f" commands/s ({i.redis_cpu_pct:.2f} % CPU), {i.threads} threads, {i.tasks} tasks, "
            f"{i.tcp_to_dovecot} connections to Dovecot, {i.redis_clients} Redis clients, "
            f"{i.redis_keys} keys\n  tasks: {i.top_tasks}\n  Redis commands/s: {i.redis_top}"
            f"\n  one account's keys: "
            f"{', '.join(i.account_keys) or 'none'}\n  {s.line()}")


def _growth(a: Idle, z: Idle) -> str:
    n = z.accounts - a.accounts
    return (f"{a.accounts} → {z.accounts} accounts, per account: RSS "
            f"{(z.rss_kib - a.rss_kib) / n:+.0f} KiB, CPU "
            f"{(z.cpu_pct - a.cpu_pct) / n:+.4f} % of a core, "
            f"{(z.switches_per_s - a.switches_per_s) / n:+.2f} switches/s, Redis "
            f"{(z.redis_cmds_per_s - a.redis_cmds_per_s) / n:+.2f} commands/s, tasks "
            f"{(z.tasks - a.tasks) / n:+.2f}, Dovecot connections "
            f"{(z.tcp_to_dovecot - a.tcp_to_dovecot) / n:+.2f}, Redis clients "
            f"{(z.redis_clients - a.redis_clients) / n:+.2f}, keys "
            f"{(z.redis_keys - a.redis_keys) / n:+.1f}")


POOL_ERRORS = ("Too many connections", "No connection available")  # the pool before, after


def _pool_errors(log: Path) -> int:
    """Lines of the pool's failures: it ran dry (before `33b0898`), or a burst waited
    `store.redis_url.POOL_WAIT_S` for a connection in vain (the blocking pool since)."""
    return sum(1 for line in log.read_text(errors="replace").splitlines()
               if any(error in line for error in POOL_ERRORS))


async def _make_accounts(peers: Peers, made: int, wanted: int, env: dict[str, str],
                         wire: dict[str, object]) -> tuple[int, bool]:
    """The accounts `acc001`… up to `wanted` in all (`default` included), made over the admin
    API of a serve process stopped after; (how many other accounts exist, whether making the
    next one failed: the instance then stops answering, see the module's doc)."""
    if made >= wanted - 1:
        return made, False
    log = Path(tempfile.mkstemp(prefix="mwm-make-", suffix=".log")[1])
    started, failure = time.monotonic(), ""
    async with bench(peers, log, env, **wire) as b:
        while made < wanted - 1:
            await asyncio.to_thread(dovecot_user, b, f"acc{made + 1:03d}")
            try:
                await add_account(b, f"acc{made + 1:03d}")
            except SystemExit as exc:
                failure = str(exc)
                break
            made += 1
    if failure:  # the log is read once the process is gone (its stdout is buffered)
        print(f"account {made + 1} ({made + 2} in all) failed: {failure}; "
              f"{_pool_errors(log)} lines of the Redis pool's failures in {log}", flush=True)
        return made, True
    print(f"accounts up to {wanted} made in {time.monotonic() - started:.0f} s", flush=True)
    return made, False


async def run(args: argparse.Namespace) -> None:
    tasks_file = Path(tempfile.mkstemp(prefix="mwm-tasks-", suffix=".jsonl")[1])
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(PROBE), os.environ.get("PYTHONPATH")])),
           "MW_TASKS_FILE": str(tasks_file)}
    wire = {"reconcile_interval_s": args.reconcile_s, "audit_interval_s": args.audit_s}
    rows: list[tuple[Idle, Series]] = []
    made = 0
    limit = roomy_inotify(max(args.levels), keep=args.keep_inotify)
    print(f"fs.inotify.max_user_instances: {limit}", flush=True)
    with started_peers("dovecot", roomy_dovecot()) as peers:
        if args.redis_pool:  # redis-py reads it from the URL's query
            env["REDIS_URL"] = f"{peers.redis_url}&max_connections={args.redis_pool}"
        for wanted in args.levels:
            made, failed = await _make_accounts(peers, made, wanted, env, wire)
            level = made + 1
            log = Path(tempfile.mkstemp(prefix="mwm-serve-", suffix=".log")[1])
            try:
                async with bench(peers, log, env, **wire) as b:
                    connected = await until_connected(b, level - 1)
                    print(f"{level} accounts: {connected} connections to Dovecot", flush=True)
                    await asyncio.sleep(args.settle_s)
                    measured = await idle(b, level, args.idle_s, tasks_file)
                    rows.append((measured, await series(b, f"{level} accounts", args.mails)))
                    print(_line(*rows[-1]), flush=True)
            except (SystemExit, AssertionError, httpx.HTTPError) as exc:
                print(f"{level} accounts: the measured instance failed: {exc!r}"[:400])
            print(f"  its log ({log}): {_pool_errors(log)} lines of the Redis pool's failures "
                  "('Too many connections', 'No connection available')", flush=True)
            if failed:
                break
    for (a, _), (z, _) in itertools.pairwise(rows):
        print(_growth(a, z))
    if len(rows) > 1:
        print("overall: " + _growth(rows[0][0], rows[-1][0]))
    print("SUMMARY many_accounts: " + json.dumps(
        [{**asdict(i), **s.summary()} for i, s in rows]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--levels", type=lambda t: [int(n) for n in t.split(",")],
                        default=[1, 50, 100, 200], help="accounts on the instance, ascending")
    parser.add_argument("--mails", type=int, default=30, help="per level")
    parser.add_argument("--idle-s", type=float, default=30.0)
    parser.add_argument("--settle-s", type=float, default=10.0)
    parser.add_argument("--reconcile-s", type=int, default=60)
    parser.add_argument("--audit-s", type=int, default=600)
    parser.add_argument("--redis-pool", type=int, default=0,
                        help="the serve processes' Redis pool size (REDIS_URL's "
                             "max_connections; redis-py's default: 100)")
    parser.add_argument("--keep-inotify", action="store_true",
                        help="leave fs.inotify.max_user_instances as it is (else raised to 4 "
                             "per account when too low and root)")
    args = parser.parse_args()
    if args.levels != sorted(args.levels) or args.levels[0] < 1:
        parser.error("--levels must ascend from 1 or more")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
