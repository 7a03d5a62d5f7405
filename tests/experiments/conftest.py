"""The experiment scripts run as ``python experiments/<script>.py`` (their directory first on
``sys.path``, the project installed), so they import each other and ``_common`` by bare name;
imported here as ``experiments.<script>``, that directory must be on the path too."""

from __future__ import annotations

import sys
from pathlib import Path

_EXPERIMENTS = str(Path(__file__).resolve().parents[2] / "experiments")
if _EXPERIMENTS not in sys.path:
    sys.path.insert(0, _EXPERIMENTS)
