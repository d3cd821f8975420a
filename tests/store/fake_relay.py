"""A poisoned relay, as another local user would serve it (tests/store/test_sec_relay.py).

Run as ``python3 fake_relay.py SOCKET [make-folder]`` by the other user, with
the system Python and the standard library only (that user cannot read
kbsync's virtualenv). With ``make-folder`` it first pre-creates the socket's
folder (0755, its own), as an attacker who got there before the real user
would. It prints ``ready`` once listening, then answers every relay call the
way kbsync's protocol expects, with made-up data: any reader that trusts it
shows ``EVIL`` hits.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys

HEADER = struct.Struct(">I")
POISON = {"doc_id": "EVIL/poison.md", "text": "EVIL poisoned answer", "chunk_index": 0}
RESULTS = {
    "collection_dimension": 384,
    "count": 999,
    "search": [["00000000-0000-0000-0000-00000000e411", 0.99, POISON]],
    "sparse_search": [["00000000-0000-0000-0000-00000000e411", 0.99, POISON]],
    "scroll_page": {"points": [], "next": None},
}


def _recv(conn: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _serve(conn: socket.socket) -> None:
    while True:
        header = _recv(conn, HEADER.size)
        if header is None:
            return
        body = _recv(conn, HEADER.unpack(header)[0])
        if body is None:
            return
        op = json.loads(body).get("op")
        result = {"pid": os.getpid(), "store": "evil"} if op == "hello" else RESULTS.get(op)
        reply = json.dumps({"v": 1, "ok": True, "result": result}).encode()
        conn.sendall(HEADER.pack(len(reply)) + reply)


def main(path: str, make_folder: bool) -> None:
    if make_folder:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.chmod(os.path.dirname(path), 0o755)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o777)
    listener.listen(8)
    print("ready", flush=True)
    while True:
        conn, _ = listener.accept()
        with conn:
            _serve(conn)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] == ["make-folder"])
