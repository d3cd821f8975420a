"""``kbsync serve`` shares the embedded store with the nightly ingest (issue 40): a server
holding it hands it over when an ingest asks, answers every search meanwhile through the
ingest's relay, and holds it again afterwards, the new documents included."""

from __future__ import annotations

import re
import threading

import pytest

from serving import Server, kbsync, serve_env

from kbsync.serve.client import ServerClient


def _share(root, start: int, count: int, word: str) -> None:
    for i in range(start, start + count):
        folder = root / f"f{i % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"doc{i}.md").write_text(f"# Note {i}\n\n{word} report number {i}: the "
                                           f"{word} was measured twice.\n")


class Hammer:
    """Clients searching ``sock`` without pause in threads of their own, until :meth:`stop`;
    ``answered`` and ``errors`` count what they got."""

    def __init__(self, sock, clients: int = 3) -> None:
        self.sock, self.answered, self.errors = sock, 0, []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run) for _ in range(clients)]
        for thread in self._threads:
            thread.start()

    def _run(self) -> None:
        with ServerClient(unix=self.sock) as mine:
            while not self._stop.is_set():
                try:
                    mine.search({"query": "volcano measured", "k": 5})
                    self.answered += 1
                except Exception as exc:  # noqa: BLE001 - counted, then asserted none
                    self.errors.append(exc)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)


@pytest.mark.slow  # ~1 minute: two ingests
@pytest.mark.parametrize("way", ["flow", "plain"])
def test_an_ingest_takes_the_store_from_serve_and_searches_never_fail(prefect_api, way,
                                                                      tmp_path) -> None:
    """``flow``: the ingest is a flow run (PREFECT_API_URL); ``plain``: without an API, in
    process (issue 42), the same handover."""
    root = tmp_path / "share"
    _share(root, 0, 40, "volcano")
    env = serve_env(tmp_path / "home", prefect_api if way == "flow" else None)
    if way == "plain":
        env = {k: v for k, v in env.items() if k != "PREFECT_API_URL"}
    done = kbsync(env, "ingest", f"share={root}", "--json", timeout=600)
    assert done.returncode == 0, done.stderr
    sock = tmp_path / "kb.sock"
    with Server(env, "--socket", str(sock)) as server:
        client = ServerClient(unix=sock)
        assert client.health()["store"] in ("idle", "direct")
        assert client.search({"query": "volcano", "k": 3})["results"]
        assert client.health()["store"] == "direct"
        hammer = Hammer(sock)
        _share(root, 40, 20, "glacier")
        done = kbsync(env, "ingest", f"share={root}", "--json", timeout=600)
        hammer.stop()
        assert done.returncode == 0, done.stderr  # never locked out by serve
        assert hammer.errors == [] and hammer.answered > 0, server.seen() + done.stderr
        server.wait_for("handed the store over")
        hits = client.search({"query": "glacier measured", "k": 5})["results"]
        assert hits and all("glacier" in h["text"] for h in hits)
        assert client.health()["handovers"] >= 1
        waits = [float(m) for m in re.findall(r"route=unix:search latency_ms=([0-9.]+)",
                                              server.seen())]
        print(f"searches during the ingest: {hammer.answered}, slowest {max(waits):.0f} ms, "
              f"median {sorted(waits)[len(waits) // 2]:.1f} ms")


@pytest.mark.slow  # ~15 s: three ingests and a server
def test_a_writer_right_after_another_under_steady_searches_gets_the_store(tmp_path) -> None:
    """Two ingests back to back while searches keep coming: when the first ends, serve's
    reader of its relay opens the folder itself (no relay); it must not keep it while
    requests keep coming, or the second ingest finds the folder held by a process that
    serves no reads and is refused (StoreUnavailable)."""
    root = tmp_path / "share"
    _share(root, 0, 20, "volcano")
    env = {k: v for k, v in serve_env(tmp_path / "home", None).items()
           if k != "PREFECT_API_URL"}
    assert kbsync(env, "ingest", f"share={root}", "--json", timeout=600).returncode == 0
    sock = tmp_path / "kb.sock"
    with Server(env, "--socket", str(sock)) as server:
        hammer = Hammer(sock)
        try:
            for n, word in enumerate(("glacier", "desert")):
                _share(root, 20 + 10 * n, 10, word)
                done = kbsync(env, "ingest", f"share={root}", "--json", timeout=600)
                assert done.returncode == 0, f"ingest {n + 1}: {done.stderr}"
        finally:
            hammer.stop()
        assert hammer.errors == [] and hammer.answered > 0, server.seen()
        hits = ServerClient(unix=sock).search({"query": "desert measured", "k": 5})["results"]
        assert hits and all("desert" in h["text"] for h in hits)
