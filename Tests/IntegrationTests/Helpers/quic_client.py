"""A QUIC client for hallpass's integration tests (aioquic, sans I/O over a
connected UDP socket, so an ICMP rejection is seen at once).

Prints the server's answer and exits 0; exits 3 when the network refuses the
flow (ICMP unreachable), 2 when nothing answers before the deadline."""
import argparse
import socket
import ssl
import sys
import time

from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import ConnectionTerminated, HandshakeCompleted, StreamDataReceived


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--port", type=int, default=443)
    parser.add_argument("--name", required=True)
    parser.add_argument("--version", default="1", choices=["1", "2"])
    parser.add_argument("--deadline", type=float, default=3.0)
    arguments = parser.parse_args()

    configuration = QuicConfiguration(is_client=True, alpn_protocols=["hq-interop"], server_name=arguments.name)
    configuration.verify_mode = ssl.CERT_NONE
    if arguments.version == "2":
        configuration.supported_versions = [0x6B3343CF]
        configuration.original_version = 0x6B3343CF
    family = socket.AF_INET6 if ":" in arguments.address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    sock.connect((arguments.address, arguments.port))
    peer = sock.getpeername()
    connection = QuicConnection(configuration=configuration)
    connection.connect(peer, now=time.time())
    deadline = time.time() + arguments.deadline
    stream = None
    answer = b""
    while time.time() < deadline:
        for data, _ in connection.datagrams_to_send(now=time.time()):
            try:
                sock.send(data)
            except ConnectionRefusedError:
                print("refused", flush=True)
                return 3
        timer = connection.get_timer()
        wait = max(0.01, min(deadline, timer if timer else deadline) - time.time())
        sock.settimeout(wait)
        try:
            data = sock.recv(65536)
            connection.receive_datagram(data, peer, now=time.time())
        except socket.timeout:
            connection.handle_timer(now=time.time())
        except ConnectionRefusedError:
            print("refused", flush=True)
            return 3
        while (event := connection.next_event()) is not None:
            if isinstance(event, HandshakeCompleted):
                stream = connection.get_next_available_stream_id()
                connection.send_stream_data(stream, arguments.name.encode(), end_stream=True)
            elif isinstance(event, StreamDataReceived) and event.stream_id == stream:
                answer += event.data
                if event.end_stream:
                    print(answer.decode().strip(), flush=True)
                    return 0
            elif isinstance(event, ConnectionTerminated):
                print(f"terminated: {event.reason_phrase}", flush=True)
                return 4
    print("timeout", flush=True)
    return 2


if __name__ == "__main__":
    sys.exit(main())
