#!/usr/bin/env python3
"""Sends a real TLS ClientHello padded past hallpass's 16 KiB peek bound, as a
student's own client could: Python's ssl module writes the hello for the given
server name, one extension of a GREASE type (0x0a0a, which servers ignore) of
PADDING bytes goes in before all the others (so the server name comes after
the padding), and the hello leaves in TLS records of at most 16 KiB (two or
more). Prints what came back:

  serverhello   the server answered with a ServerHello (the hello got through)
  alert         the server answered with a TLS alert
  reset         the connection was reset (hallpass refuses a blocked flow so)
  closed        the connection closed with no answer
  timeout       no answer in time

usage: padded-hello.py ADDRESS PORT SERVER_NAME [PADDING]
  PADDING: bytes, default 20000; max fills the extensions up, which makes the
  hello longer than 64 KiB
"""
import socket
import ssl
import struct
import sys


def client_hello(server_name):
    """The handshake message of a ClientHello for server_name, as OpenSSL writes it."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    records = outgoing.read()
    message = b""
    while records:
        content_type, _, length = struct.unpack("!BHH", records[:5])
        assert content_type == 22, "not a handshake record"
        message += records[5:5 + length]
        records = records[5 + length:]
    assert message[0] == 1, "not a ClientHello"
    return message


def padded(message, padding):
    """message with one extension of type 0x0a0a and `padding` zero bytes first among its extensions."""
    body = message[4:]
    at = 2 + 32                      # legacy_version, random
    at += 1 + body[at]               # legacy_session_id
    at += 2 + struct.unpack("!H", body[at:at + 2])[0]   # cipher_suites
    at += 1 + body[at]               # legacy_compression_methods
    extensions_length = struct.unpack("!H", body[at:at + 2])[0]
    # The extensions' length is 16 bits: "max" (-1) fills it up (the message is then past 64 KiB).
    room = 65535 - extensions_length - 4
    padding = room if padding < 0 else padding
    if padding > room:
        sys.exit("padded-hello: at most %d bytes of padding fit beside this hello's extensions" % room)
    extension = struct.pack("!HH", 0x0A0A, padding) + bytes(padding)
    body = body[:at] + struct.pack("!H", extensions_length + len(extension)) + extension + body[at + 2:]
    return bytes([1]) + len(body).to_bytes(3, "big") + body


def records(message, size=16384):
    out = b""
    for start in range(0, len(message), size):
        piece = message[start:start + size]
        out += struct.pack("!BHH", 22, 0x0301, len(piece)) + piece
    return out


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    address, port, server_name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    padding = sys.argv[4] if len(sys.argv) == 5 else "20000"
    padding = -1 if padding == "max" else int(padding)
    if not -1 <= padding <= 65535:
        sys.exit("padded-hello: PADDING must be 0 to 65535, or max")
    stream = records(padded(client_hello(server_name), padding))
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as connection:
        connection.settimeout(5)
        try:
            connection.connect((address, port))
            connection.sendall(stream)
            answer = connection.recv(16)
        except ConnectionResetError:
            print("reset")
            return
        except socket.timeout:
            print("timeout")
            return
    if not answer:
        print("closed")
    elif answer[0] == 22 and len(answer) >= 6 and answer[5] == 2:
        print("serverhello")
    elif answer[0] == 21:
        print("alert")
    else:
        print("other " + answer.hex())


if __name__ == "__main__":
    main()
