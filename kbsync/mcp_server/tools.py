"""The MCP tools of ``kbsync mcp``: ``search``, ``ask`` and ``namespaces``.

Each tool has a typed JSON schema (every parameter described, ``k`` bounded to 1..100)
and returns both a readable text block (what a model reads) and structured content (the
``--json`` object of the CLI command behind it: ``kbsync search``, ``ask``, ``stats``), so
an agent sees the same fields as a script.

Errors: every failure is a tool error (``isError``) whose one text line names the cause as
``Kind: message`` (``Kind`` an :class:`~kbsync.errors.ErrorCode`, as in the CLI's JSON
``error.kind``), and the server goes on serving. That covers arguments the schema refuses
(``k=100000``), a blank query, a malformed filter, an unknown namespace (the line lists
the namespaces the reader can see), a missing or locked store, a failing model. No
traceback reaches the client; it goes to stderr under ``-v``.

Tested by ``tests/mcp_server/test_mcp_stdio.py``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kbsync.app.cli_support import classify, is_engine_panic, one_line, panic_error
from kbsync.errors import UsageError
from kbsync.mcp_server.backend import Backend
from kbsync.mcp_server.render import answer_text, namespaces_text, search_text

log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "kbsync's knowledge base: documents of shared folders (PDF, Office, HTML, Markdown, "
    "code), chunked and indexed. Call `namespaces` first to see which namespaces you can "
    "read, then `search` for passages (cite their doc_id, page and heading) or `ask` for an "
    "answer with numbered citations. You only ever see documents your user may read.")

# -- what the tools return (structured content; extra fields of the --json objects pass) ---


class Hit(BaseModel):
    """One passage found."""

    model_config = ConfigDict(extra="allow")
    rank: int = Field(description="1 for the best hit")
    score: float = Field(description="relevance (cosine in dense mode, fused 0-1 in hybrid)")
    doc_id: str = Field(description="the document: ROOT/relative/path, stable across runs")
    path: str = Field(description="the file's path on the share")
    chunk_index: int = Field(description="the passage's position in its document")
    heading_path: str = Field(description="the headings above the passage, 'A > B'")
    page_start: int | None = Field(description="first page (PDF, slides), else null")
    page_end: int | None = Field(description="last page, else null")
    text: str = Field(description="the passage")


class SearchOutput(BaseModel):
    """The object of ``kbsync search --json``."""

    model_config = ConfigDict(extra="allow")
    query: str
    namespace: str
    mode: str
    raw_count: int = Field(description="candidates the store returned, over all searches")
    kept_count: int = Field(description="candidates left after merging, the score threshold "
                                        "and de-duplication; the first k are the results")
    results: list[Hit]
    notes: list[str] = Field(default_factory=list, description="what did not go as asked")


class CitationOut(BaseModel):
    """A passage the answer cites as ``[n]``."""

    model_config = ConfigDict(extra="allow")
    n: int
    doc_id: str
    page_start: int | None
    page_end: int | None
    heading_path: str


class AskOutput(BaseModel):
    """The object of ``kbsync ask --json``."""

    model_config = ConfigDict(extra="allow")
    query: str
    namespace: str
    answer: str
    answered: bool = Field(description="false: nothing relevant was found; the answer says so")
    citations: list[CitationOut]
    results: list[Hit]


class NamespacesOutput(BaseModel):
    """The object of ``kbsync stats --json``: the counts this reader may see."""

    model_config = ConfigDict(extra="allow")
    collection: str
    namespaces: dict[str, dict[str, int]] = Field(
        description="namespace -> documents, chunks, failed_embeddings (the reader's own counts)")


# -- parameters -----------------------------------------------------------------------------
Query = Annotated[str, Field(description="what to look for, in natural language or keywords")]
Namespace = Annotated[str, Field(min_length=1, max_length=200,
                                 description="the namespace to search (see the `namespaces` "
                                             "tool); default 'default'")]
K = Annotated[int, Field(ge=1, le=100, description="number of passages, 1-100 (default 5)")]
Mode = Annotated[Literal["hybrid", "dense"], Field(
    description="hybrid (dense vectors + BM25 keywords, the default: best on names, codes and "
                "exact terms) or dense (meaning only)")]
Root = Annotated[str | None, Field(description="only documents of this root (its NAME: the "
                                               "first part of a doc_id)")]
PathPrefix = Annotated[str | None, Field(description="only documents under this folder of the "
                                                     "root, e.g. 'docs/api' (whole names)")]
Types = Annotated[list[str] | None, Field(
    description="only these file types: pdf, html, docx, xlsx, pptx, csv, markdown, text, "
                "json, code, image")]
Since = Annotated[str | None, Field(description="only files modified at or after this ISO "
                                                "date or datetime, e.g. 2024-05-01 (UTC)")]
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                            open_world_hint=False)


class KbsyncMCP(MCPServer):
    """The SDK's server, with an argument its tool does not name refused (the SDK ignores
    it: a misspelt ``namespace`` would silently search ``default``) and a refused argument
    reported in one line (the SDK's own text is pydantic's multi-line report)."""

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Any = None) -> Any:
        """See :meth:`MCPServer.call_tool`; argument errors become one ``UsageError`` line."""
        schema = next((t.input_schema for t in await self.list_tools() if t.name == name), None)
        if schema is not None:
            named = list(schema.get("properties", {}))
            extra = sorted(set(arguments) - set(named))
            if extra:
                raise ToolError(f"UsageError: unknown argument {', '.join(extra)}; {name} "
                                f"takes {', '.join(named) or 'none'}")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(f"UsageError: {invalid_arguments(exc.__cause__)}") from None
            raise


def invalid_arguments(error: ValidationError) -> str:
    """A pydantic report in one line: ``k: Input should be ... (got 100000); ...``."""
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item.get("loc", ())) or "arguments"
        got = item.get("input")
        shown = "" if isinstance(got, dict) else f" (got {repr(got)[:60]})"
        parts.append(f"{where}: {item.get('msg', 'invalid')}{shown}")
    return one_line("invalid arguments: " + "; ".join(parts))


def error_result(exc: BaseException) -> CallToolResult:
    """The tool error of ``exc``: one line ``Kind: message``."""
    if is_engine_panic(exc):
        exc = panic_error(exc)
    _, kind, message = classify(exc)
    if str(kind) == "InternalError":
        log.error("kbsync mcp: unexpected %s", message, exc_info=exc)
    else:
        log.debug("kbsync mcp: tool failed", exc_info=exc)
    return CallToolResult(content=[TextContent(type="text", text=f"{kind}: {message}")],
                          is_error=True)


def _result(text: str, data: dict[str, Any]) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def unknown_namespace(namespace: str, visible: list[str]) -> str:
    """The line of a namespace this reader cannot see (never says whether it exists)."""
    shown = repr(namespace)[:80]
    if not visible:
        return (f"unknown namespace {shown}: you can read no namespace yet (nothing "
                "you may read is indexed)")
    return (f"unknown namespace {shown}: the namespaces you can read are "
            + ", ".join(repr(n) for n in visible))


class Tools:
    """The three tools over one backend, one call at a time."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._lock = threading.Lock()

    def _run(self, call: Callable[[], CallToolResult]) -> CallToolResult:
        try:
            with self._lock:
                return call()
        except Exception as exc:  # noqa: BLE001 - every failure is one line to the client
            return error_result(exc)
        except BaseException as exc:  # noqa: BLE001 - an engine panic the adapter missed
            if not is_engine_panic(exc):
                raise
            return error_result(exc)

    def _check_namespace(self, namespace: str, data: dict[str, Any]) -> None:
        """An empty reply from a namespace the reader cannot see is an error naming those it can."""
        if data.get("raw_count") or data.get("kept_count") or data.get("results"):
            return
        visible = sorted(self.backend.stats({}).get("namespaces", {}))
        if namespace not in visible:
            raise UsageError(unknown_namespace(namespace, visible))

    def search(self, query: Query, namespace: Namespace = "default", k: K = 5,
               mode: Mode = "hybrid", root: Root = None, path_prefix: PathPrefix = None,
               types: Types = None, modified_since: Since = None,
               ) -> Annotated[CallToolResult, SearchOutput]:
        """Search the knowledge base for passages: each result has its doc_id, path, page
        range, heading path, score and text. Cite doc_id (and page or heading) when you use
        a passage. Narrow with root, path_prefix, types or modified_since; all given must
        hold. Returns at most k passages (1-100); an empty list means nothing matched."""
        args = {"query": query, "namespace": namespace, "k": k, "mode": mode, "root": root,
                "path_prefix": path_prefix, "types": types, "modified_since": modified_since}

        def call() -> CallToolResult:
            data = self.backend.search(args)
            self._check_namespace(namespace, data)
            return _result(search_text(data), data)
        return self._run(call)

    def ask(self, question: Annotated[str, Field(description="the question to answer")],
            namespace: Namespace = "default",
            k: Annotated[int, Field(ge=1, le=100, description="passages retrieved for the "
                                                              "answer, 1-100 (default 5)")] = 5,
            ) -> Annotated[CallToolResult, AskOutput]:
        """Answer a question from the knowledge base with numbered [n] citations (doc_id,
        pages, heading) of the passages used. answered=false means nothing relevant was
        found: the answer says so rather than guessing. Needs a chat model configured
        where the index is read (KBSYNC_LLM_*); use `search` without one."""
        args = {"query": question, "namespace": namespace, "k": k}

        def call() -> CallToolResult:
            data = self.backend.ask(args)
            self._check_namespace(namespace, data)
            return _result(answer_text(data), data)
        return self._run(call)

    def namespaces(self) -> Annotated[CallToolResult, NamespacesOutput]:
        """List the namespaces you can read, with your own counts of documents, chunks and
        failed embeddings in each (only what your user may read is counted). Call it first
        to pick the namespace for `search` and `ask`."""
        def call() -> CallToolResult:
            data = self.backend.stats({})
            return _result(namespaces_text(data), data)
        return self._run(call)


def build_server(backend: Backend) -> KbsyncMCP:
    """The MCP server of ``kbsync mcp`` over ``backend`` (run it with ``.run("stdio")``)."""
    server = KbsyncMCP(name="kbsync", title="kbsync knowledge base", version=_version(),
                       instructions=INSTRUCTIONS, log_level="WARNING")
    tools = Tools(backend)
    for fn, title in ((tools.search, "Search the knowledge base"),
                      (tools.ask, "Answer from the knowledge base, with citations"),
                      (tools.namespaces, "List readable namespaces")):
        server.add_tool(fn, title=title, annotations=READ_ONLY, structured_output=True)
    return server


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kbsync")
    except PackageNotFoundError:  # a source tree that was never installed
        return "unknown"
