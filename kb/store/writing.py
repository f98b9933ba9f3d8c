"""Writing the store file: ``JSON.stringify(store, null, 2)`` plus a newline, streamed."""

from __future__ import annotations

import io
from typing import IO

from kb.store.canonical import js_stringify
from kb.store.snapshot import Snapshot


def write_store(snapshot: Snapshot, handle: IO[bytes]) -> None:
    """Write the file: ``JSON.stringify(store, null, 2)`` plus a trailing newline.

    Streams claim by claim; a claim read from a file is copied as it stood.
    """
    if snapshot.extra:
        document = {
            "version": snapshot.version,
            "hash": snapshot.hash,
            "claims": list(snapshot.wire),
            **snapshot.extra,
        }
        handle.write((js_stringify(document, indent=2) + "\n").encode("utf-8", "surrogatepass"))
        return
    header = f'{{\n  "version": {snapshot.version},\n  "hash": "{snapshot.hash}",\n  "claims": ['
    handle.write(header.encode())
    texts = snapshot.texts
    if not len(texts):
        handle.write(b"]\n}\n")
        return
    for index in range(len(texts)):
        handle.write(b"\n    " if index == 0 else b",\n    ")
        handle.write(texts.text(index))
    handle.write(b"\n  ]\n}\n")


def render_store(snapshot: Snapshot) -> str:
    """The file text (see :func:`write_store`)."""
    buffer = io.BytesIO()
    write_store(snapshot, buffer)
    return buffer.getvalue().decode("utf-8", "surrogatepass")
