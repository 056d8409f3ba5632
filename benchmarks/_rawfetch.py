"""The floor of a read command: GET exactly these collections, follow `continue`, read every byte, decode nothing.

    python benchmarks/_rawfetch.py URL CA TOKEN URI...

Stdlib only (http.client over TLS, one kept-alive connection), so its own start-up is the interpreter's. The
`continue` token sits in the list's metadata, which the apiserver writes before `items`: found in the first bytes.
"""

from __future__ import annotations

import http.client
import re
import ssl
import sys
from urllib.parse import quote, urlsplit

_CONTINUE = re.compile(rb'"continue":"([^"]+)"')


def main(url: str, ca: str, token: str, uris: list[str]) -> int:
    u = urlsplit(url)
    conn = http.client.HTTPSConnection(u.hostname, u.port, context=ssl.create_default_context(cafile=ca))
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    total = 0
    for uri in uris:
        token_ = None
        while True:
            sep = "&" if "?" in uri else "?"
            conn.request("GET", uri + (f"{sep}continue={quote(token_)}" if token_ else ""), headers=headers)
            resp = conn.getresponse()
            body = resp.read()
            total += len(body)
            if resp.status >= 400 and resp.status != 404:
                print(f"{uri}: {resp.status}", file=sys.stderr)
                return 1
            m = _CONTINUE.search(body, 0, 4096)
            if not m:
                break
            token_ = m.group(1).decode()
    print(total)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]))
