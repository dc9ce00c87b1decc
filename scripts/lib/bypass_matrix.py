#!/usr/bin/env python3
"""Clients and servers for scripts/bypass-matrix.sh that Debian does not package.

  doq-server ADDRESS PORT CERT KEY        DNS over QUIC (RFC 9250, ALPN "doq"), answers every A
                                          question with ANSWER (default 10.83.0.2)
  doq-client ADDRESS PORT NAME            asks NAME over DoQ; prints the address; exit 0 on an answer
  udp-echo ADDRESS PORT [PORT...]         echoes every datagram (for the probes below)
  udp-probe ADDRESS PORT KIND             sends KIND's first datagram, waits for the echo:
                                          wireguard  a WireGuard handshake initiation (148 bytes)
                                          quic-unknown  a QUIC long header, version 0x1a2b3c4d, padded to 1200
                                          exit 0 echo came back, 1 refused or no answer
  ech-hello ADDRESS PORT OUTER_NAME       a TLS 1.3 ClientHello with server_name OUTER_NAME and an
                                          encrypted_client_hello extension (outer, GREASE-shaped);
                                          exit 0 when the server answers anything, 1 on reset/no answer

The DNS and TLS bytes are built here from the RFCs (RFC 1035, RFC 8446, RFC 9849's
ECHClientHello), not taken from any capture.
"""
import asyncio
import os
import socket
import struct
import sys


def dns_query(name, qtype=1, ident=0x4242):
    q = struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0)
    for label in name.strip(".").split("."):
        q += bytes([len(label)]) + label.encode()
    return q + b"\x00" + struct.pack("!HH", qtype, 1)


def dns_answer(query, address):
    ident, flags = struct.unpack("!HH", query[:4])
    end = 12
    while query[end] != 0:
        end += 1 + query[end]
    question = query[12:end + 5]
    header = struct.pack("!HHHHHH", ident, 0x8180 | (flags & 0x0100), 1, 1, 0, 0)
    record = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + socket.inet_aton(address)
    return header + question + record


# ---------------------------------------------------------------- DoQ (aioquic)

async def doq_server(address, port, cert, key, answer):
    from aioquic.asyncio import serve
    from aioquic.asyncio.protocol import QuicConnectionProtocol
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.events import StreamDataReceived

    class DoQ(QuicConnectionProtocol):
        buffers = {}

        def quic_event_received(self, event):
            if isinstance(event, StreamDataReceived):
                data = self.buffers.get(event.stream_id, b"") + event.data
                self.buffers[event.stream_id] = data
                if len(data) >= 2 and len(data) >= 2 + struct.unpack("!H", data[:2])[0]:
                    reply = dns_answer(data[2:], answer)
                    self._quic.send_stream_data(event.stream_id, struct.pack("!H", len(reply)) + reply, end_stream=True)
                    self.transmit()

    config = QuicConfiguration(is_client=False, alpn_protocols=["doq"])
    config.load_cert_chain(cert, key)
    await serve(address, port, configuration=config, create_protocol=DoQ)
    await asyncio.Future()


async def doq_client(address, port, name):
    import ssl
    from aioquic.asyncio import connect
    from aioquic.quic.configuration import QuicConfiguration

    config = QuicConfiguration(is_client=True, alpn_protocols=["doq"], verify_mode=ssl.CERT_NONE, server_name="doq.example.test")
    async with connect(address, port, configuration=config) as client:
        reader, writer = await client.create_stream()
        query = dns_query(name, ident=0)  # RFC 9250 section 4.2.1: ID 0
        writer.write(struct.pack("!H", len(query)) + query)
        writer.write_eof()
        data = await reader.read()
        if len(data) >= 2 + 12 + 16:
            print(socket.inet_ntoa(data[-4:]))
            return 0
    return 1


# ---------------------------------------------------------------- UDP probes

def udp_echo(address, ports):
    sockets = []
    for port in ports:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((address, int(port)))
        sockets.append(s)
    import selectors
    selector = selectors.DefaultSelector()
    for s in sockets:
        selector.register(s, selectors.EVENT_READ)
    while True:
        for key, _ in selector.select():
            data, peer = key.fileobj.recvfrom(65535)
            key.fileobj.sendto(data, peer)


def wireguard_initiation():
    # WireGuard whitepaper section 5.4.2: type 1, three reserved zero bytes, sender index,
    # ephemeral (32), encrypted static (48), encrypted timestamp (28), mac1 (16), mac2 (16).
    return bytes([1, 0, 0, 0]) + os.urandom(4) + os.urandom(32 + 48 + 28 + 16) + bytes(16)


def quic_unknown_version():
    # RFC 9000 section 17.2 long header with a version nobody speaks (not 0x?a?a?a?a).
    packet = bytes([0xC3]) + struct.pack("!I", 0x1A2B3C4D) + bytes([8]) + os.urandom(8) + bytes([0]) + os.urandom(40)
    return packet + bytes(1200 - len(packet))


def udp_probe(address, port, kind):
    payload = {"wireguard": wireguard_initiation, "quic-unknown": quic_unknown_version}[kind]()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1.0)
    s.connect((address, int(port)))
    for _ in range(3):
        try:
            s.send(payload)
            if s.recv(65535):
                return 0
        except ConnectionRefusedError:
            return 1
        except socket.timeout:
            continue
    return 1


# ---------------------------------------------------------------- TLS with ECH

def client_hello(outer_name):
    def ext(kind, body):
        return struct.pack("!HH", kind, len(body)) + body
    name = outer_name.encode()
    server_name = ext(0, struct.pack("!HBH", len(name) + 3, 0, len(name)) + name)
    versions = ext(43, bytes([2, 3, 4]))
    groups = ext(10, struct.pack("!HH", 2, 0x001D))
    key_share = ext(51, struct.pack("!HHH", 36, 0x001D, 32) + os.urandom(32))
    signatures = ext(13, struct.pack("!HHHH", 6, 0x0403, 0x0804, 0x0401))
    # RFC 9849 section 5: ECHClientHello, type outer (0): HPKE suite (KDF, AEAD), config_id, enc, payload.
    ech_body = bytes([0]) + struct.pack("!HH", 0x0001, 0x0001) + bytes([0x42]) + struct.pack("!H", 32) + os.urandom(32)
    ech_body += struct.pack("!H", 144) + os.urandom(144)
    ech = ext(0xFE0D, ech_body)
    extensions = server_name + versions + groups + key_share + signatures + ech
    body = struct.pack("!H", 0x0303) + os.urandom(32) + bytes([32]) + os.urandom(32)
    body += struct.pack("!HHH", 4, 0x1301, 0x1302) + bytes([1, 0]) + struct.pack("!H", len(extensions)) + extensions
    handshake = bytes([1]) + struct.pack("!I", len(body))[1:] + body
    return bytes([22, 3, 1]) + struct.pack("!H", len(handshake)) + handshake


def ech_hello(address, port, outer_name):
    try:
        s = socket.create_connection((address, int(port)), timeout=3)
        s.sendall(client_hello(outer_name))
        return 0 if s.recv(5) else 1
    except (ConnectionResetError, ConnectionRefusedError, socket.timeout, OSError):
        return 1


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 64
    command, args = argv[1], argv[2:]
    if command == "doq-server":
        asyncio.run(doq_server(args[0], int(args[1]), args[2], args[3], args[4] if len(args) > 4 else "10.83.0.2"))
    elif command == "doq-client":
        try:
            return asyncio.run(asyncio.wait_for(doq_client(args[0], int(args[1]), args[2]), 5))
        except (asyncio.TimeoutError, ConnectionError, OSError):
            return 1
    elif command == "udp-echo":
        udp_echo(args[0], args[1:])
    elif command == "udp-probe":
        return udp_probe(*args)
    elif command == "ech-hello":
        return ech_hello(*args)
    else:
        print(__doc__, file=sys.stderr)
        return 64
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
