"""``ray start`` whose node stays on 127.0.0.1: ``python tests/ray_loopback.py start ...`` runs
Ray's own command line with the same arguments (the ``ray_cluster`` fixture starts its head and
worker so).

On Linux, Ray 2.60's ``ray start`` turns ``--node-ip-address=127.0.0.1`` (and the head's
address ``127.0.0.1:port`` a worker joins) into the machine's network address
(``ray._private.services.resolve_ip_for_localhost``): every node would advertise, and its
servers listen on, that address.  Ray's single-machine mode (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER
=0``) keeps 127.0.0.1 but refuses to start a second node, so this script keeps loopback
addresses as given instead, and nothing else changes.  A test helper, not a module: pytest
does not collect it (no ``test_`` prefix)."""

from __future__ import annotations

import sys

from ray._private import services
from ray.scripts.scripts import main

services.resolve_ip_for_localhost = lambda host: host  # 127.0.0.1 stays 127.0.0.1

if __name__ == "__main__":
    sys.exit(main())
