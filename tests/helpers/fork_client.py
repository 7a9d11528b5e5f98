"""The caller's half of ``fork_server.py``: hand one command to the pre-imported server.

Run by the ``python`` shim of a docs block as ``python -S fork_client.py SOCKET PYTHON ARGS...``
(standard library only, so it starts in a few milliseconds). It passes its own stdin, stdout and
stderr (the open files themselves, over the Unix socket), folder, environment and umask, then
waits: a signal it receives (``kill $SERVER``, ``timeout``) is forwarded to the command, and it
ends the way the command ended (the exit code, or killed by the same signal). When the server
says "fresh" (or is not there), it becomes ``PYTHON ARGS...`` (exec), a real interpreter.

``run_in_server`` does the same for the test harness (``run_page.py`` under a timeout).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
             signal.SIGUSR2)  # fmt: skip


def request(sock_path: str, argv: list[str], cwd: str, env: dict, fds: list[int]):
    """Send one command (``fds``: its stdin, stdout and stderr); return (connection, pid), or
    (None, reason) to run it fresh."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(sock_path)
        umask = os.umask(0o022)
        os.umask(umask)
        targets = [target for target, fd in enumerate(fds) if _is_open(fd)]  # 0, 1, 2
        body = json.dumps(
            {"argv": argv, "cwd": cwd, "env": env, "umask": umask, "fds": targets}
        ).encode()
        socket.send_fds(conn, [b"R"], [fds[target] for target in targets])
        conn.sendall(struct.pack("!I", len(body)) + body)
        reply = _readline(conn)
    except OSError as err:
        conn.close()
        return None, f"no server ({err})"
    if not reply.startswith("P "):
        conn.close()
        return None, reply
    return conn, int(reply[2:])


def wait(conn: socket.socket) -> int:
    """The command's wait status (as ``os.waitpid`` gives it), once it has ended."""
    reply = _readline(conn)
    conn.close()
    if not reply.startswith("X "):
        raise RuntimeError(f"fork server broke off: {reply!r}")
    return int(reply[2:])


def forward(conn: socket.socket, signum: int) -> None:
    try:
        conn.sendall(f"K {signum}\n".encode())
    except OSError:
        pass


def run_in_server(sock_path, argv, cwd, env, fds, timeout: float) -> int | None:
    """Run ``python ARGV`` in the server with these std fds; its exit code (negative: killed by
    that signal; a command past ``timeout`` is killed), or None when it must run fresh."""
    conn, pid = request(sock_path, argv, cwd, env, fds)
    if conn is None:
        return None
    conn.settimeout(timeout)
    try:
        status = wait(conn)
    except TimeoutError:
        conn.settimeout(None)
        forward(conn, signal.SIGKILL)
        status = wait(conn)
    return os.waitstatus_to_exitcode(status)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _readline(conn: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(64)
        if not chunk:
            return data.decode() or "EOF"
        data += chunk
    return data.decode().strip()


def _end_like(status: int) -> None:
    """Exit the way the command did: same exit code, or killed by the same signal."""
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)  # a signal that does not end a process (never sent by the kernel)
    os._exit(os.waitstatus_to_exitcode(status))


def main(argv: list[str]) -> None:
    sock_path, python, args = argv[1], argv[2], argv[3:]
    conn, pid = request(sock_path, args, os.getcwd(), dict(os.environ), [0, 1, 2])
    if conn is None:
        os.execv(python, [python, *args])
    for signum in FORWARDED:
        signal.signal(signum, lambda s, _frame: forward(conn, s))
    try:
        status = wait(conn)
    except RuntimeError as err:
        print(f"fork_client: {err}", file=sys.stderr)
        os._exit(1)
    _end_like(status)


if __name__ == "__main__":
    main(sys.argv)
