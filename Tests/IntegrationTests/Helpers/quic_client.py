"""A QUIC client for hallpass's integration tests and scripts/soak.sh
(aioquic, sans I/O over a connected UDP socket, so an ICMP rejection is seen
at once).

Run as a program: prints the server's answer and exits 0; exits 3 when the
network refuses the flow (ICMP unreachable), 2 when nothing answers before
the deadline, 4 when the connection is closed without an answer. Imported:
`request(...)` returns the same status with the text and the local port."""
import argparse
import socket
import ssl
import sys
import time

from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import ConnectionTerminated, HandshakeCompleted, StreamDataReceived


def request(address, name, port=443, version="1", deadline=3.0, local_port=0, junk_first=False):
    """One QUIC connection to `address` with server name `name` that sends
    the name on a stream and reads the answer. Returns (status, text,
    local port): 0 and the answer, 3 "refused", 2 "timeout", 4 "terminated: ...".
    `local_port` binds the socket to that port (0: any); `junk_first` sends
    one datagram that is no QUIC before the connection, from the same socket."""
    configuration = QuicConfiguration(is_client=True, alpn_protocols=["hq-interop"], server_name=name)
    configuration.verify_mode = ssl.CERT_NONE
    if version == "2":
        configuration.supported_versions = [0x6B3343CF]
        configuration.original_version = 0x6B3343CF
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        if local_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", local_port))
        sock.connect((address, port))
        if junk_first:
            sock.send(b"\x23" + bytes(47))
            time.sleep(0.1)
        peer = sock.getpeername()
        local_port = sock.getsockname()[1]
        connection = QuicConnection(configuration=configuration)
        connection.connect(peer, now=time.time())
        end = time.time() + deadline
        stream = None
        answer = b""
        while time.time() < end:
            for data, _ in connection.datagrams_to_send(now=time.time()):
                try:
                    sock.send(data)
                except ConnectionRefusedError:
                    return 3, "refused", local_port
            timer = connection.get_timer()
            wait = max(0.01, min(end, timer if timer else end) - time.time())
            sock.settimeout(wait)
            try:
                data = sock.recv(65536)
                connection.receive_datagram(data, peer, now=time.time())
            except socket.timeout:
                connection.handle_timer(now=time.time())
            except ConnectionRefusedError:
                return 3, "refused", local_port
            while (event := connection.next_event()) is not None:
                if isinstance(event, HandshakeCompleted):
                    stream = connection.get_next_available_stream_id()
                    connection.send_stream_data(stream, name.encode(), end_stream=True)
                elif isinstance(event, StreamDataReceived) and event.stream_id == stream:
                    answer += event.data
                    if event.end_stream:
                        return 0, answer.decode().strip(), local_port
                elif isinstance(event, ConnectionTerminated):
                    return 4, f"terminated: {event.reason_phrase}", local_port
        return 2, "timeout", local_port


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--port", type=int, default=443)
    parser.add_argument("--name", required=True)
    parser.add_argument("--version", default="1", choices=["1", "2"])
    parser.add_argument("--deadline", type=float, default=3.0)
    parser.add_argument("--local-port", type=int, default=0)
    parser.add_argument("--junk-first", action="store_true")
    arguments = parser.parse_args()
    status, text, _ = request(arguments.address, arguments.name, arguments.port, arguments.version, arguments.deadline,
                              arguments.local_port, arguments.junk_first)
    print(text, flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
