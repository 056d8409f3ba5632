"""Defaults of drain and set-mode, stated once: the library's options and the CLI's help both read them.

Plain values and no imports, so the CLI can read them at startup for free.
"""

DEFAULT_TIMEOUT_S = 600.0  # evictions and (set-mode) the operator, together; kubectl drain's flag syntax
DEFAULT_POLL_S = 1.0  # the longest pause between two looks at the node while waiting
DEFAULT_MAX_PARALLEL = 32  # evictions in flight at once per node: 200 take ~0.25 s on a loopback server, 16 took 0.4 s
DEFAULT_LOCK_DURATION_S = 60  # a lock nobody renews for this long is expired
DEFAULT_EVICT_ROUNDS = 3  # list-and-evict rounds for NPU pods that land after the first list
