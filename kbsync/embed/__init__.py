"""Embedding: providers (hash, local, openai), a disk cache and the service.

Callers use :func:`build_embedding_service` and the returned
:class:`EmbeddingService`; providers are only constructed here.
"""

from __future__ import annotations

import hashlib
import threading

from diskcache.core import DBNAME

from kbsync.embed.base import EmbeddingProvider, TextKind
from kbsync.embed.cache import EmbeddingCache, cache_key
from kbsync.embed.hash import HashEmbedder
from kbsync.embed.base import BatchResult
from kbsync.embed.service import EmbeddingService, EmbedOutcome
from kbsync.errors import UsageError
from kbsync.home import make_dir, make_file, open_home
from kbsync.settings import DEFAULT_HASH_DIMENSION, EmbedProvider, Settings

__all__ = [
    "BatchResult",
    "EmbedOutcome",
    "EmbeddingCache",
    "EmbeddingProvider",
    "EmbeddingService",
    "HashEmbedder",
    "TextKind",
    "build_embedding_service",
    "build_provider",
    "cache_key",
    "clear_service_cache",
]

_SERVICES: dict[tuple, EmbeddingService] = {}
_SERVICES_LOCK = threading.Lock()


def build_provider(settings: Settings) -> EmbeddingProvider:
    """The provider named by ``settings.embed_provider`` (not cached; see below).

    Raises:
        UsageError: unknown local model, missing base URL, or
            ``KBSYNC_EMBED_DIMENSIONS`` set for a model that cannot honour it.
    """
    provider = settings.embed_provider
    if provider is EmbedProvider.HASH:
        return HashEmbedder(settings.embed_dimensions or DEFAULT_HASH_DIMENSION)
    if provider is EmbedProvider.LOCAL:
        from kbsync.embed.local import LocalEmbedder

        embedder = LocalEmbedder(settings.embed_model_name(), model_cache=settings.model_path)
        if settings.embed_dimensions and settings.embed_dimensions != embedder.dimension:
            raise UsageError(
                f"KBSYNC_EMBED_DIMENSIONS={settings.embed_dimensions} but local model "
                f"{embedder.model} gives {embedder.dimension} dimensions"
            )
        return embedder
    from kbsync.embed.openai_provider import OpenAIEmbedder

    key = settings.embed_api_key.get_secret_value() if settings.embed_api_key else None
    return OpenAIEmbedder(
        settings.embed_model_name(),
        base_url=settings.embed_base_url,
        api_key=key,
        dimensions=settings.embed_dimensions,
        timeout_s=settings.embed_timeout_s,
    )


def build_embedding_service(settings: Settings) -> EmbeddingService:
    """The process-wide :class:`EmbeddingService` for these settings.

    One service per distinct embedding configuration lives for the process, so
    the local model loads once, an openai endpoint's dimension is probed once,
    and a batch size learned from a "batch too large" answer holds for the rest
    of the run. The cache is ``settings.cache_path`` bounded to
    ``settings.cache_size_gb``.
    """
    secret = settings.embed_api_key.get_secret_value() if settings.embed_api_key else ""
    identity = (
        settings.embed_provider.value,
        settings.embed_model_name(),
        settings.embed_base_url,
        settings.embed_dimensions,
        # Only a digest of the key, so that the key itself is held nowhere new.
        hashlib.sha256(secret.encode()).hexdigest() if secret else "",
        settings.embed_timeout_s,
        settings.embed_batch_size,
        settings.embed_max_attempts,
        settings.query_timeout_s,
        str(settings.cache_path.resolve()),
        settings.cache_size_gb,
    )
    with _SERVICES_LOCK:
        service = _SERVICES.get(identity)
        if service is None:
            open_home(settings.home, shared_group=settings.shared_group)
            make_dir(settings.cache_path)
            # Made here, so SQLite's database (and its -wal/-shm, which take its mode) get
            # the home's file mode: 0660 in a shared home, not SQLite's 0644 under umask 007.
            make_file(settings.cache_path / DBNAME)
            service = EmbeddingService(
                build_provider(settings),
                cache=EmbeddingCache.from_gb(settings.cache_path, settings.cache_size_gb),
                batch_size=settings.embed_batch_size,
                max_attempts=settings.embed_max_attempts,
                query_budget_s=settings.query_timeout_s,
            )
            _SERVICES[identity] = service
    return service


def clear_service_cache() -> None:
    """Forget (and close) the process-wide services; for tests."""
    with _SERVICES_LOCK:
        for service in _SERVICES.values():
            service.close()
        _SERVICES.clear()
