"""Serves a directory over HTTPS (the test's JWKS server for trustedIssuers[].jwksUrl).

usage: https_server.py PORT DIRECTORY CERT KEY
"""
import functools
import http.server
import ssl
import sys

port, directory, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=directory)
server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
server.socket = ctx.wrap_socket(server.socket, server_side=True)
print(f"serving {directory} on https://127.0.0.1:{port}", flush=True)
server.serve_forever()
