"""Event hooks ``tickwork serve --on-event`` loads in the serve tests."""

from __future__ import annotations

import json
import os

from tickwork.events import Event


def record(event: Event) -> None:
    """Append the event as one JSON line to ``$TICKWORK_TEST_EVENTS``."""
    with open(os.environ["TICKWORK_TEST_EVENTS"], "a", encoding="utf-8") as out:
        out.write(json.dumps(event.to_dict()) + "\n")


def broken(event: Event) -> None:
    raise RuntimeError(f"broken hook on {event.kind}")


NOT_CALLABLE = 3
