"""The driver's progress server and the tasks' reporter (zkcoord.migrate.spark_job /
spark_tasks), over real loopback sockets: no Spark."""

from __future__ import annotations

import socket

from tests.support.daemons import wait_for
from zkcoord.migrate.spark_job import _ProgressServer
from zkcoord.migrate.spark_tasks import ProgressReporter


def test_counts_the_lines_of_this_runs_token_and_ignores_others():
    server = _ProgressServer("127.0.0.1")
    server.start()
    try:
        ours, stranger = ProgressReporter(("127.0.0.1", server.port), server.token), \
            ProgressReporter(("127.0.0.1", server.port), "not-the-token")
        ours.report(3, 40)
        ours.report(2, 5)
        stranger.report(100, 1000)
        wait_for(lambda: server.counts() == (5, 45), 10, "the server counted our two lines", 0.01)
        ours.close()
        stranger.close()
    finally:
        server.close()
    assert server.counts() == (5, 45)


def test_close_ends_the_accepting_thread_and_the_listening():
    server = _ProgressServer("127.0.0.1")
    server.start()
    acceptor = server._acceptor
    assert acceptor is not None and acceptor.is_alive()
    server.close()
    # Closing the socket alone left the thread blocked in accept, still listening on the port, for as
    # long as the process lived (one per job).
    assert not acceptor.is_alive()
    probe = socket.socket()
    try:
        assert probe.connect_ex(("127.0.0.1", server.port)) != 0
    finally:
        probe.close()


def test_a_reporter_whose_server_is_gone_gives_up_quietly():
    server = _ProgressServer("127.0.0.1")
    server.start()
    server.close()
    reporter = ProgressReporter(("127.0.0.1", server.port), server.token, timeout_s=0.5)
    reporter.report(1, 1)  # refused: no exception, and it does not try again
    reporter.report(1, 1)
    reporter.close()
