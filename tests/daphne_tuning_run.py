"""Run by tests/asgi/test_daphne_tuning.py in a process of its own (a twisted reactor runs once per process).

    python tests/daphne_tuning_run.py on|off PLANS_JSON

A real asyncio-backed twisted reactor (daphne's) serves TCP connections; real
sockets read them slowly from threads, with small receive buffers so that
large writes fill the kernel's buffer. Each plan is a list of operations
the server does on its connection: ["write", size] (distinct random bytes),
["turn"] (wait for the loop's next turn), ["cork", [size, ...]] (those
writes in one daphne_tuning.corked() block), ["cork_sequence", [a, b]] (a
write then a writeSequence in one block), ["cork_close_waiting", [size, ...]]
(writes, loseConnection and a wait on the loop in one block: the plan's end),
["close"] (loseConnection),
["keep_writing"] (small writes each turn until the connection is lost: the
client resets it). Prints JSON: per plan what the client received, what the
server wrote, whether the connection was lost, and how many writes went out
at once (the socket not registered for writing after the write) or queued,
and how many writes corked blocks held.
"""

import asyncio
import json
import random
import socket
import struct
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from twisted.internet import asyncioreactor

asyncioreactor.install()

from twisted.internet import protocol, reactor  # noqa: E402

from dashboard.server import daphne_tuning  # noqa: E402

if sys.argv[1] == "on":
    daphne_tuning.install()
PLANS = json.loads(sys.argv[2])
written = {i: bytearray() for i in range(len(PLANS))}
lost = {i: False for i in range(len(PLANS))}
received = {}
counts = {"at_once": 0, "queued": 0, "held": 0}


class Server(protocol.Protocol):
    plan_index = None

    def dataReceived(self, data):
        if self.plan_index is None:
            self.plan_index = struct.unpack("!I", data[:4])[0]
            self.ops = list(PLANS[self.plan_index])
            self.rng = random.Random(self.plan_index)
            self.step()

    def write(self, size, sequence=False):
        chunk = self.rng.randbytes(size)
        written[self.plan_index] += chunk
        if sequence:
            self.transport.writeSequence([chunk])
            return
        self.transport.write(chunk)
        counts["queued" if self.transport in reactor.getWriters() else "at_once"] += 1

    async def held_across_the_loop(self, sizes):
        """A corked block that waits on the loop after asking to close: what it held still goes first."""
        with daphne_tuning.corked():
            for size in sizes:
                self.write(size)
            self.transport.loseConnection()
            await asyncio.sleep(0.05)

    def step(self):
        while self.ops:
            op = self.ops.pop(0)
            if op[0] == "write":
                self.write(op[1])
            elif op[0] == "turn":
                reactor.callLater(0, self.step)
                return
            elif op[0] == "cork":  # these writes in one corked() block
                with daphne_tuning.corked():
                    for size in op[1]:
                        self.write(size)
                    held = daphne_tuning._held
                    counts["held"] += len(held.get(self.transport, [])) if held is not None else 0
            elif op[0] == "cork_sequence":  # a write, then a writeSequence, in one block
                with daphne_tuning.corked():
                    self.write(op[1][0])
                    self.write(op[1][1], sequence=True)
            elif op[0] == "cork_close_waiting":
                self.waiting = asyncio.ensure_future(self.held_across_the_loop(op[1]))
                return
            elif op[0] == "close":
                self.transport.loseConnection()
            elif op[0] == "keep_writing":
                if not lost[self.plan_index]:
                    self.write(1000)
                    self.ops.insert(0, op)
                    reactor.callLater(0.001, self.step)
                return

    def connectionLost(self, reason):
        if self.plan_index is not None:
            lost[self.plan_index] = True


def client(port: int, index: int, reset: bool) -> None:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(struct.pack("!I", index))
    if reset:
        time.sleep(0.05)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # RST: the server's next sends fail
        received[index] = b""
        return
    rng = random.Random(1000 + index)
    got = bytearray()
    while True:
        data = sock.recv(rng.choice([512, 4096, 65536]))
        if not data:
            break
        got += data
        if rng.random() < 0.05:
            time.sleep(0.002)  # a slow reader: the server's socket buffer fills
    sock.close()
    received[index] = bytes(got)


def main() -> None:
    factory = protocol.Factory.forProtocol(Server)
    port = reactor.listenTCP(0, factory, interface="127.0.0.1").getHost().port
    threads = [
        threading.Thread(target=client, args=(port, i, plan[-1] == ["keep_writing"]), daemon=True)
        for i, plan in enumerate(PLANS)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60

    def check():
        done = len(received) == len(PLANS) and all(
            lost[i] for i, plan in enumerate(PLANS) if plan[-1] == ["keep_writing"]
        )
        if done or time.monotonic() > deadline:
            reactor.stop()
        else:
            reactor.callLater(0.01, check)

    reactor.callLater(0.01, check)
    reactor.run()
    print(
        json.dumps(
            {
                "plans": [
                    {
                        "same": received.get(i) == bytes(written[i]),
                        "received_bytes": len(received.get(i, b"")),
                        "written_bytes": len(written[i]),
                        "lost": lost[i],
                    }
                    for i in range(len(PLANS))
                ],
                **counts,
            }
        )
    )


main()
