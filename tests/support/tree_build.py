"""One build of the package from the checkout at a time, across test processes.

Building a wheel from the checkout (``python -m build``, or uv building a path
source) runs setuptools in the checkout itself: it writes ``build/`` and
``tickwork.egg-info/`` there and removes its ``build/bdist.*`` folder when
done. Two builds at once (two pytest-xdist workers, one in
tests/packaging and one in tests/examples) could delete each other's files, so
each takes this lock first.
"""

from __future__ import annotations

import fcntl
import hashlib
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def building_from_the_checkout(repo: Path) -> Iterator[None]:
    """Hold the checkout's build lock (a ``flock`` on a file named after
    ``repo`` in the temporary directory) until the block ends."""
    key = hashlib.sha256(str(repo.resolve()).encode()).hexdigest()[:16]
    lock = Path(tempfile.gettempdir()) / f"tickwork-checkout-build-{key}.lock"
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
