"""The floor of a read command: GET exactly these collections, follow `continue`, read every byte, decode nothing.

    python benchmarks/_rawfetch.py URL CA TOKEN URI...

Stdlib only (http.client over TLS, one kept-alive connection a collection), so its own start-up is the
interpreter's. The collections are fetched at once, one thread each, as rblnctl fetches its independent reads
(rblnctl.kube.parallel): the floor is what the server takes to answer them side by side. The `continue` token sits
in the list's metadata, which the apiserver writes before `items` for built-in kinds and after them for custom
resources (their keys sorted): found in the first or the last bytes. A continue page sends
the token alone (the server refuses resourceVersionMatch beside it, as rblnctl.kube.client.Kube.iter_list knows),
and a 410 Expired page reads on with the token the Status offers, as rblnctl does for a display list.
"""

from __future__ import annotations

import http.client
import re
import ssl
import sys
import threading
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

_CONTINUE = re.compile(rb'"continue":"([^"]+)"')
_FIRST_PAGE_ONLY = ("resourceVersion", "resourceVersionMatch")


def fetch(url: str, ca: str, token: str, uri: str) -> int:
    """Bytes read for one collection, every page; raises RuntimeError on a failure."""
    u = urlsplit(url)
    conn = http.client.HTTPSConnection(u.hostname, u.port, context=ssl.create_default_context(cafile=ca))
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    path, _, query = uri.partition("?")
    later = urlencode([(k, v) for k, v in parse_qsl(query) if k not in _FIRST_PAGE_ONLY])
    total, token_ = 0, None
    while True:
        page = uri if token_ is None else f"{path}?{later}{'&' if later else ''}continue={quote(token_)}"
        conn.request("GET", page, headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        total += len(body)
        if resp.status >= 400 and resp.status not in (404, 410):
            raise RuntimeError(f"{page}: {resp.status}")
        m = _CONTINUE.search(body, 0, 4096) or _CONTINUE.search(body, max(0, len(body) - 4096))
        if not m:
            if resp.status == 410:
                raise RuntimeError(f"{page}: 410 and no token to read on with")
            return total
        token_ = m.group(1).decode()


def main(url: str, ca: str, token: str, uris: list[str]) -> int:
    sizes: dict[str, int] = {}
    errors: list[str] = []

    def one(uri: str) -> None:
        try:
            sizes[uri] = fetch(url, ca, token, uri)
        except Exception as e:  # reported below, and the exit code says so
            errors.append(str(e))

    threads = [threading.Thread(target=one, args=(uri,)) for uri in uris]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return 1
    print(sum(sizes.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]))
