"""EmbeddingCache: keys, compact values, counters, eviction, several processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from kbsync.embed.base import TextKind
from kbsync.embed.cache import EmbeddingCache, cache_key, pack_vector, unpack_vector


def test_key_changes_with_everything_that_shapes_the_vector() -> None:
    base = cache_key("openai", "m", 8, TextKind.PASSAGE, "text")
    assert base == cache_key("openai", "m", 8, "passage", "text")
    others = {
        cache_key("local", "m", 8, TextKind.PASSAGE, "text"),
        cache_key("openai", "m2", 8, TextKind.PASSAGE, "text"),
        cache_key("openai", "m", 16, TextKind.PASSAGE, "text"),
        cache_key("openai", "m", 8, TextKind.QUERY, "text"),
        cache_key("openai", "m", 8, TextKind.PASSAGE, "text "),
    }
    assert base not in others and len(others) == 5
    assert len(base) == 64 and "text" not in base


def test_values_are_float32_bytes() -> None:
    vector = [0.1, -2.5, 3.0, 1e-8]
    blob = pack_vector(vector)
    assert len(blob) == 16
    assert unpack_vector(blob) == [float(x) for x in __import__("array").array("f", vector)]


def test_get_many_set_many_and_counters(tmp_path: Path) -> None:
    with EmbeddingCache(tmp_path / "c") as cache:
        assert cache.get_many(["a", "b"]) == [None, None]
        assert (cache.hits, cache.misses) == (0, 2)
        assert cache.set_many({"a": [1.0, 2.0], "b": [0.5, 0.25]}) == 2
        assert cache.get_many(["b", "x", "a"]) == [[0.5, 0.25], None, [1.0, 2.0]]
        assert (cache.hits, cache.misses) == (2, 3)
        assert cache.stats() == {"hits": 2, "misses": 3, "entries": 2}
    # Reopened: the data is on disk; counters are per instance.
    with EmbeddingCache(tmp_path / "c") as again:
        assert again.get("a") == [1.0, 2.0] and again.hits == 1


def test_size_bound_evicts(tmp_path: Path) -> None:
    with EmbeddingCache(tmp_path / "c", size_limit_bytes=256 * 1024) as cache:
        for start in range(0, 2000, 100):
            cache.set_many((f"k{i}", [float(i)] * 384) for i in range(start, start + 100))
        assert 0 < len(cache) < 2000  # 3 MB written into a 256 KB bound
        assert cache.get("k1999") == [1999.0] * 384  # the newest survive


def test_two_processes_write_the_same_directory(tmp_path: Path) -> None:
    directory = tmp_path / "shared"
    script = textwrap.dedent(
        """
        import sys
        from kbsync.embed.cache import EmbeddingCache
        cache = EmbeddingCache(sys.argv[1])
        who = int(sys.argv[2])
        for start in range(0, 400, 20):
            # every key is written by both processes, in batches, at the same time
            cache.set_many((f"k{i}", [float(i), float(who)]) for i in range(start, start + 20))
            cache.get_many([f"k{i}" for i in range(start)])
        cache.close()
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(directory), str(who)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for who in (1, 2)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()
    with EmbeddingCache(directory) as cache:
        values = cache.get_many([f"k{i}" for i in range(400)])
    assert all(v is not None and v[0] == float(i) and v[1] in (1.0, 2.0) for i, v in enumerate(values))
