"""Namespace isolation as a property: random documents over random namespaces, random
queries, every mode. No hit ever comes from another namespace, and no point flagged
``embedding_failed`` is ever returned.
"""

from __future__ import annotations

import itertools
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbsync.query.search import CANDIDATE_FACTOR, search
from kbsync.text.sparse import encode_document
from kbsync.store import Point

NAMESPACES = ("alpha", "beta", "gamma")
WORDS = ("key", "rotation", "invoice", "ERR_7Q4Z", "quota", "upload", "密钥", "轮换", "bucket",
         "policy", "the", "export")
_names = itertools.count()

chunk = st.tuples(
    st.sampled_from(NAMESPACES),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=8).map(" ".join),
    st.booleans(),  # embedding_failed
)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunks=st.lists(chunk, min_size=1, max_size=30),
       query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join),
       namespace=st.sampled_from(NAMESPACES + ("empty",)),
       k=st.integers(1, 6))
def test_no_result_from_another_namespace_and_no_flagged_point(
        edge, service, chunks, query, namespace, k) -> None:
    coll = f"iso{next(_names)}"  # a fresh collection per example, one store per test
    edge.ensure_collection(coll, dimension=service.dimension, keyword_indexes=("namespace",),
                           sparse=True)
    points, flagged = [], set()
    for i, (ns, text, failed) in enumerate(chunks):
        vector = [0.0] * service.dimension if failed else service.embed_query(text)
        points.append(Point(str(uuid.UUID(int=i + 1)), {
            "namespace": ns, "doc_id": f"{ns}/d{i}", "text": f"{text} #{i}",
            "embedding_failed": failed}, vector, encode_document(text)))
        if failed:
            flagged.add(f"{ns}/d{i}")
    edge.upsert(coll, points)
    eligible = sum(1 for ns, _, failed in chunks if ns == namespace and not failed)
    for mode in ("dense", "hybrid"):
        result = search(query, store=edge, service=service, collection=coll,
                        namespace=namespace, k=k, mode=mode)
        assert all(h.doc_id.startswith(f"{namespace}/") for h in result.results)
        assert not {h.doc_id for h in result.results} & flagged
        # raw_count is k * 4 when the namespace holds enough, else everything eligible
        # (hybrid: the dense prefetch alone already sees that many); texts are unique.
        assert result.raw_count == result.kept_count == min(eligible, k * CANDIDATE_FACTOR)
        assert len(result.results) == min(k, eligible)
