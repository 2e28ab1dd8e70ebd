"""The second process of test_disconnect_when_peer_dies.

    python peer.py FABRIC HOST:PORT

Connects, rings one doorbell (imm 42), waits for the test's answering
doorbell, prints "ready" and then sleeps outside the library until it is
killed (a peer killed inside a provider call can leave shared state locked:
see the README's provider limits).
"""

import sys
import time

import wimm

fabric, addr = sys.argv[1], sys.argv[2]
ctx = wimm.Context(fabric)
src = ctx.register(bytearray(64))
conn = ctx.connect(addr, timeout=30)
conn.write_imm(src, 0, 0, 0, 42)
deadline = time.monotonic() + 60
while not any(e.type == wimm.EV_WRITE_IMM and e.imm == 43 for e in ctx.poll()):
    if time.monotonic() > deadline:
        sys.exit("peer: no answer from the test in 60 s")
print("ready", flush=True)
time.sleep(3600)
