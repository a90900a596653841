"""A loopback webhook receiver for Alertmanager, as `make demo` runs it: every notification
it is sent is appended to a JSON-lines file, one payload a line, and answered 200.

`python -m services.monitoring.webhook --port 9097 --out FILE` serves until stopped; it
binds 127.0.0.1 only, and refuses a body over 1 MiB (Alertmanager's are a few kB).
`python -m services.monitoring.webhook show FILE ALERTNAME [--wait S]` waits until a
firing notification of that alert is in the file and prints each alert of it, one a line:
its labels and summary.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MAX_BODY = 1 << 20


def serve(port: int, out: Path) -> None:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # http.server's name
            size = int(self.headers.get("Content-Length") or 0)
            if size > MAX_BODY:
                self.send_response(413)
                self.end_headers()
                return
            body = self.rfile.read(size)
            try:
                payload = json.loads(body)
            except ValueError:
                self.send_response(400)
                self.end_headers()
                return
            with lock, out.open("a", encoding="utf-8") as f:
                f.write(json.dumps(payload) + "\n")
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.serve_forever()


def firing(path: Path, alertname: str) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out: list[dict[str, Any]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        payload = json.loads(line)
        out.extend(
            a
            for a in payload.get("alerts", [])
            if a.get("status") == "firing" and a.get("labels", {}).get("alertname") == alertname
        )
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["show"]:
        parser = argparse.ArgumentParser(prog="webhook show")
        parser.add_argument("file", type=Path)
        parser.add_argument("alertname")
        parser.add_argument("--wait", type=float, default=0.0)
        args = parser.parse_args(argv[1:])
        deadline = time.monotonic() + args.wait
        alerts = firing(args.file, args.alertname)
        while not alerts and time.monotonic() < deadline:
            time.sleep(0.5)
            alerts = firing(args.file, args.alertname)
        for a in alerts:
            labels = a.get("labels", {})
            print(
                f"  {labels.get('alertname')} scenario={labels.get('scenario')} "
                f"window={labels.get('window')} severity={labels.get('severity')}: "
                f"{a.get('annotations', {}).get('summary', '')}"
            )
        return 0 if alerts else 1
    parser = argparse.ArgumentParser(prog="webhook")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    serve(args.port, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
