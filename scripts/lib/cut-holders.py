"""Holds N keep-alive HTTP connections for scripts/bench-cut.sh.

Opens one connection per name c<i>.<domain> to the server's port 80, asks
for / on each (so the flow is named and allowed), then waits. Prints
"ready" once every connection has its answer, and for each connection that
ends afterwards "cut <i> <unix time> <how>" (how: an errno name, or eof).
Exits when all have ended or after the timeout.
"""
import errno
import selectors
import socket
import sys
import time

server, domain, count, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
selector = selectors.DefaultSelector()
connections = []
for i in range(count):
    s = socket.create_connection((server, 80), timeout=10)
    s.sendall(f"GET / HTTP/1.1\r\nHost: c{i}.{domain}\r\n\r\n".encode())
    answer = s.recv(200)
    if not answer.startswith(b"HTTP/1.1 200"):
        print(f"connection {i}: no answer ({answer[:40]!r})", flush=True)
        sys.exit(1)
    s.setblocking(False)
    selector.register(s, selectors.EVENT_READ, i)
    connections.append(s)
print("ready", flush=True)
deadline = time.monotonic() + timeout
open_count = count
while open_count and time.monotonic() < deadline:
    for key, _ in selector.select(timeout=0.5):
        s, i = key.fileobj, key.data
        try:
            data = s.recv(100)
            how = "eof" if not data else None
        except OSError as error:
            how = errno.errorcode.get(error.errno, str(error.errno))
        if how is None:
            continue
        print(f"cut {i} {time.time():.6f} {how}", flush=True)
        selector.unregister(s)
        s.close()
        open_count -= 1
print(f"done {count - open_count} of {count} ended", flush=True)
