"""The embedded Redis of `messageweave run`: no TCP listener, a password, private files, and
every command finds it from the data directory alone (issue #12, item 4)."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import time
from pathlib import Path

import redis

from messageweave.store.redis import (
    PASSWORD_FILE,
    SOCKET_NAME,
    SOCKET_POINTER_FILE,
    EmbeddedRedis,
    embedded_url,
)
from tests.helpers import console_script, free_port, wait_healthy


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("REDIS_URL", "CONFIG_ENCRYPTION_KEY", "PORT", "DEBUG_ENABLED",
                        "DEBUG_TOKEN")}
    env["COLUMNS"] = "200"
    return env


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _long_dir(base: Path) -> Path:
    path = base / ("d" * 60) / ("long-data-directory-" * 5)
    assert len(str(path)) >= 150
    return path


def _tcp_listeners(pid: int) -> list[str]:
    """Listening TCP sockets (IPv4 and IPv6) held by process `pid`, from /proc."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd)
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A = LISTEN
                found.append(f"{table} {fields[1]}")
    return found


def _unauthenticated_ping(path: Path) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(str(path))
        s.sendall(b"PING\r\n")
        return s.recv(200)


def test_run_with_a_long_data_dir_has_no_tcp_port_and_requires_the_password(
    tmp_path: Path,
) -> None:
    """Bug: with a data dir path over ~100 characters the unix socket did not fit, so `run`
    fell back to a passwordless 127.0.0.1 TCP port any local user could use to become admin;
    and the AOF and redis.log were 0644."""
    data_dir = _long_dir(tmp_path)
    redis_dir = data_dir / "redis"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [console_script("messageweave"), "run", "--port", str(port), "--data-dir", str(data_dir)],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        wait_healthy(url, proc)
        password = (redis_dir / PASSWORD_FILE).read_text().strip()
        assert len(password) >= 32
        pid = int((redis_dir / "redis.pid").read_text())
        # redis-server sets its process title to its listeners: a TCP one shows as ip:port.
        title = Path(f"/proc/{pid}/cmdline").read_bytes()
        assert b" unixsocket:" in title and password.encode() not in title, title
        assert _tcp_listeners(pid) == []

        sock = Path((redis_dir / SOCKET_POINTER_FILE).read_text().strip())
        assert sock.name == SOCKET_NAME and len(str(sock)) < 108
        assert _mode(sock.parent) == 0o700 and os.lstat(sock.parent).st_uid == os.getuid()
        assert _unauthenticated_ping(sock).startswith(b"-NOAUTH")

        client = redis.Redis.from_url(embedded_url(redis_dir) or "")
        try:
            assert client.config_get("port") == {"port": "0"}
            assert client.config_get("requirepass")["requirepass"] == password
        finally:
            client.close()

        for name in (PASSWORD_FILE, SOCKET_POINTER_FILE, "appendonly.aof", "redis.log",
                     "redis.pid"):
            assert _mode(redis_dir / name) == 0o600, name
        assert _mode(data_dir / "encryption.key") == 0o600
        assert _mode(redis_dir) == 0o700

        # An operator command finds the same server from the data directory alone.
        diagnose = subprocess.run(
            [console_script("messageweave"), "diagnose", "--data-dir", str(data_dir)],
            env=_env(), capture_output=True, text=True, timeout=60,
        )
        out = diagnose.stdout + diagnose.stderr
        assert "redis: answers PING" in out, out
        assert "ok   environment: the data directory" in out, out  # not "set" (issue #34)
        assert password not in out
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=20)[0]
    assert proc.returncode == 0, output
    assert password not in output
    assert not sock.parent.exists(), "the private socket directory outlived the service"


def test_files_of_an_older_run_are_narrowed_to_0600(tmp_path: Path) -> None:
    """Bug: Redis creates files with its umask and keeps existing modes, so an AOF and log
    written 0644 by an older version stayed world-readable."""
    redis_dir = tmp_path / "redis"
    redis_dir.mkdir(mode=0o755)
    os.chmod(redis_dir, 0o755)
    for name in ("appendonly.aof", "redis.log"):
        (redis_dir / name).write_text("")
        os.chmod(redis_dir / name, 0o644)
    server = EmbeddedRedis(redis_dir)
    try:
        server.start()
        client = redis.Redis.from_url(server.url)
        try:
            client.set("k", "v")
            client.bgrewriteaof()
            deadline = time.monotonic() + 10
            while client.info("persistence")["aof_rewrite_in_progress"] and \
                    time.monotonic() < deadline:
                time.sleep(0.05)
            client.save()
        finally:
            client.close()
        assert _mode(redis_dir) == 0o700
        for path in redis_dir.rglob("*"):
            if path.is_file() and not path.is_symlink():
                assert _mode(path) == 0o600, path.name
            elif path.is_dir():
                assert _mode(path) == 0o700, path.name
        assert {"appendonly.aof", "dump.rdb", "redis.log"} <= {p.name for p in redis_dir.iterdir()}
    finally:
        server.stop()


def test_restart_keeps_the_socket_path_and_never_reuses_a_directory_it_does_not_own(
    tmp_path: Path,
) -> None:
    """Bugs: a restart that moved the socket would strand clients holding the old URL; and
    reusing the recorded socket directory without checking it would let another local user
    who pre-created (or was given) that directory sit next to our socket."""
    redis_dir = _long_dir(tmp_path) / "redis"
    server = EmbeddedRedis(redis_dir)
    first = server.start()
    try:
        server.stop()
        assert server.socket is not None and not server.socket.parent.exists()
        assert server.start() == first
        assert embedded_url(redis_dir) == first
    finally:
        server.stop()

    # A recorded directory that is not private (mode 0755) is not used again.
    recorded = Path((redis_dir / SOCKET_POINTER_FILE).read_text().strip()).parent
    recorded.mkdir(mode=0o700)
    os.chmod(recorded, 0o755)
    fresh = EmbeddedRedis(redis_dir)
    try:
        url = fresh.start()
        assert fresh.socket is not None and fresh.socket.parent != recorded
        assert _mode(fresh.socket.parent) == 0o700
        assert redis.Redis.from_url(url).ping()
    finally:
        fresh.stop()
        recorded.rmdir()


def test_a_stale_pid_file_naming_another_process_is_not_killed(tmp_path: Path) -> None:
    """Bug: the stale-server cleanup sent SIGTERM to whatever process had the pid from an old
    pid file, although after a reboot that pid may belong to an unrelated process."""
    bystander = subprocess.Popen(["sleep", "30"])
    redis_dir = tmp_path / "redis"
    redis_dir.mkdir()
    (redis_dir / "redis.pid").write_text(f"{bystander.pid}\n")
    server = EmbeddedRedis(redis_dir)
    try:
        server.start()
        assert bystander.poll() is None, "an unrelated process was killed"
    finally:
        server.stop()
        bystander.kill()
        bystander.wait()
