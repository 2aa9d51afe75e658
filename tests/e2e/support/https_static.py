"""A static file server over HTTPS on loopback: the Provider Network Mirror Protocol is
plain GETs of JSON files and archives, so a directory written by scripts/release --mirror,
served as is, is a network mirror.

    python3 https_static.py DIR CERT_PEM KEY_PEM

Binds 127.0.0.1 on a free port and prints `listening PORT` on stdout once it accepts
connections. Logs one line per request on stderr (`GET /path 200`), which tests read to
see what the CLI fetched. Only GET and HEAD; no directory listings (a mirror has none).
"""

import http.server
import os
import ssl
import sys


def main():
    root, cert, key = sys.argv[1:4]
    root = os.path.realpath(root)

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=root, **kwargs)

        def list_directory(self, path):
            self.send_error(404, "no listings")
            return None

        def log_request(self, code="-", size="-"):
            sys.stderr.write(f"{self.command} {self.path} {code}\n")
            sys.stderr.flush()

        def log_message(self, fmt, *args):
            sys.stderr.write((fmt % args) + "\n")
            sys.stderr.flush()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
