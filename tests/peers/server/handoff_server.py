"""A few lines of OpenAI-compatible server for the started-server tests, run as `python handoff_server.py PORT MODE`:

- ok: it listens and answers (/health, /v1/models, /v1/completions) until stopped.
- handoff: it listens, forks a child that answers on the same socket, then exits (status 3, or the signal named by
  SIGNAL in its environment) once it has answered one request: a started server gone while another process of its
  session keeps answering on its port.
- detached: it starts a server in a session of its own (double fork, setsid) and sleeps: what answers on the port
  is not the started process nor anything it still owns.
- busy: it exits with status 1 at once, as a server does on an address already in use.
"""

import http.server
import json
import os
import signal
import socketserver
import sys
import time

port, mode = int(sys.argv[1]), sys.argv[2]


class Handler(http.server.BaseHTTPRequestHandler):
    def _send(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/v1/models":
            self._send({"object": "list", "data": [{"id": "tiny", "object": "model", "owned_by": "handoff-test"}]})
        elif self.path == "/health":
            self._send({})
        else:
            self.send_error(404)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        choice = {"index": 0, "text": " 4", "finish_reason": "stop"}
        self._send(
            {
                "id": "c",
                "object": "text_completion",
                "model": "tiny",
                "choices": [choice],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1},
            }
        )
        if os.environ.get("ANSWERED_FILE"):
            open(os.environ["ANSWERED_FILE"], "a").close()

    def log_message(self, *args):
        pass


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


print(f"handoff_server {mode} on port {port}", flush=True)
if mode == "busy":
    print("OSError: [Errno 98] Address already in use", flush=True)
    sys.exit(1)
if mode == "detached":
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            Server(("127.0.0.1", port), Handler).serve_forever()
        os._exit(0)
    time.sleep(600)
    sys.exit(0)
server = Server(("127.0.0.1", port), Handler)
if mode == "handoff":
    answered = os.environ["ANSWERED_FILE"]
    if os.fork() == 0:
        server.serve_forever()  # the forked child answers on the socket the started process opened
    server.socket.close()
    while not os.path.exists(answered):
        time.sleep(0.02)
    print("the started process leaves now; its child keeps answering", flush=True)
    if os.environ.get("SIGNAL"):
        os.kill(os.getpid(), getattr(signal, os.environ["SIGNAL"]))
    sys.exit(3)
server.serve_forever()
