"""An HTTP/1.1 GET over IPv6 whose packets carry a Destination Options
extension header (a sticky IPV6_DSTOPTS socket option), for the
hallpass integration tests.

Exit codes: 0 and the body on stdout when the server answered; 3 when the
connection was reset or refused; 2 on a timeout.
"""
import argparse
import socket
import sys

# Destination Options header: next header (filled in by the kernel), length 0
# (8 bytes in all), then a PadN option of 4 bytes of padding.
DESTINATION_OPTIONS = bytes([0, 0, 1, 4, 0, 0, 0, 0])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--port", type=int, default=80)
    arguments = parser.parse_args()

    connection = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    connection.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_DSTOPTS, DESTINATION_OPTIONS)
    connection.settimeout(5)
    try:
        connection.connect((arguments.address, arguments.port))
        request = f"GET / HTTP/1.1\r\nHost: {arguments.name}\r\nConnection: close\r\n\r\n"
        connection.sendall(request.encode("ascii"))
        response = b""
        while True:
            chunk = connection.recv(4096)
            if not chunk:
                break
            response += chunk
    except (ConnectionResetError, ConnectionRefusedError, BrokenPipeError) as error:
        print(f"refused: {error}")
        return 3
    except socket.timeout:
        print("timed out")
        return 2
    finally:
        connection.close()
    if not response:
        # A reset that arrives as an empty read on some paths.
        print("closed without an answer")
        return 3
    body = response.split(b"\r\n\r\n", 1)[-1]
    sys.stdout.write(body.decode("utf-8", "replace"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
