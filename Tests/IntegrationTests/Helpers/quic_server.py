"""A QUIC server for hallpass's integration tests (aioquic): completes the
handshake for any server name and answers each stream with "ok " and what
the client sent (the client sends the name it asked for)."""
import argparse
import asyncio

from aioquic.asyncio import QuicConnectionProtocol, serve
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import StreamDataReceived


class Answer(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._received = {}

    def quic_event_received(self, event):
        if isinstance(event, StreamDataReceived):
            data = self._received.get(event.stream_id, b"") + event.data
            self._received[event.stream_id] = data
            if event.end_stream:
                self._quic.send_stream_data(event.stream_id, b"ok " + data + b"\n", end_stream=True)
                self.transmit()


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, default=443)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    arguments = parser.parse_args()
    configuration = QuicConfiguration(is_client=False, alpn_protocols=["hq-interop"])
    configuration.load_cert_chain(arguments.cert, arguments.key)
    await serve(arguments.host, arguments.port, configuration=configuration, create_protocol=Answer)
    print("listening", flush=True)
    await asyncio.Future()


if __name__ == "__main__":
    asyncio.run(main())
