#!/usr/bin/env python3
"""Accept one TCP connection and save every byte it carries until the peer
closes (or 5 s pass): the PROXY header a real proxy sent, then the stream.

    capture.py HOST PORT OUT.bin

Prints "listening" once the socket is bound, so a script can start the
proxy and the client after it. Knows nothing of the PROXY protocol.
"""
import socket
import sys
import time


def main():
    host, port, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(1)
        print("listening", flush=True)
        listener.settimeout(20)
        conn, peer = listener.accept()
        data = b""
        deadline = time.monotonic() + 5
        with conn:
            while time.monotonic() < deadline:
                conn.settimeout(max(0.01, deadline - time.monotonic()))
                try:
                    chunk = conn.recv(65536)
                except (socket.timeout, ConnectionResetError):
                    # HAProxy ends health checks with a reset.
                    break
                if not chunk:
                    break
                data += chunk
    with open(out, "wb") as f:
        f.write(data)
    print(f"{out}: {len(data)} bytes from {peer}", flush=True)


if __name__ == "__main__":
    main()
