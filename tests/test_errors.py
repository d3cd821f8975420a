"""The error kinds: one branch each, one code each, and codes in JSON that are ErrorCode members.

Static checks read the source with ``ast`` (no module of the package is imported
for them), so they also cover modules whose imports are heavy.
"""

from __future__ import annotations

import ast
import inspect
import json
import pickle
from pathlib import Path

import pytest

from kbsync import errors
from kbsync.app import cli_support
from kbsync.errors import (DiskFull, EmbeddingTransientError, ErrorCode, KbsyncError, LLMTransientError,
                           PermanentError, StoreError, StoreFailure, StoreUnavailable, TransientError,
                           UsageError)
from kbsync.models import Failure

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [p for top in ("kbsync", "tasks", "flows") for p in sorted((ROOT / top).rglob("*.py"))]
ROOTS = {KbsyncError, TransientError, PermanentError}
FAMILIES = {errors.EmbeddingError, errors.StoreFailure, errors.LLMError}  # for except, never raised
# Kinds that exit 2 (UsageError); every other kind exits 1. A kind moving across this line
# changes the CLI's contract.
USAGE_KINDS = {"UsageError", "RootConflict", "EmbedderMismatch", "LLMNotConfigured", "QueryFileError",
               "PermissionsNotCaptured"}


def _kinds() -> list[type[KbsyncError]]:
    return [cls for _, cls in inspect.getmembers(errors, inspect.isclass)
            if issubclass(cls, KbsyncError) and cls.__module__ == errors.__name__]


def _parsed() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(encoding="utf-8"))) for path in SOURCES]


@pytest.mark.parametrize("cls", sorted(set(_kinds()) - ROOTS - FAMILIES, key=lambda c: c.__name__))
def test_every_kind_is_on_exactly_one_branch(cls) -> None:
    assert issubclass(cls, TransientError) != issubclass(cls, PermanentError), cls


def test_families_are_on_no_branch_and_never_raised() -> None:
    names = {cls.__name__ for cls in FAMILIES | ROOTS - {KbsyncError}}
    for cls in FAMILIES:
        assert not issubclass(cls, (TransientError, PermanentError))
    for path, tree in _parsed():
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                func = node.exc.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                assert name not in names, f"{path}:{node.lineno} raises the family {name}"


def test_every_kind_lives_in_errors_py() -> None:
    kinds = {cls.__name__ for cls in _kinds()}
    for path, tree in _parsed():
        if path.name == "errors.py" and path.parent.name == "kbsync":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                assert not bases & kinds, f"{path}:{node.lineno} defines {node.name} outside errors.py"


def test_codes_are_unique_and_cover_every_kind() -> None:
    assert len(ErrorCode.__members__) == len(list(ErrorCode)), "an alias: two names, one code"
    assert all(code.name == code.value for code in ErrorCode)
    for cls in _kinds():
        assert cls.__name__ in ErrorCode.__members__, cls


def test_a_code_prints_and_serialises_as_its_plain_string() -> None:
    exc = StoreUnavailable("down")
    assert exc.kind is ErrorCode.StoreUnavailable
    assert str(exc.kind) == f"{exc.kind}" == "StoreUnavailable"
    failure = Failure("r/a.md", "a.md", exc.kind, "down")
    assert failure.error is ErrorCode.StoreUnavailable
    assert Failure("r/a.md", "a.md", "StoreUnavailable", "down") == failure  # a str converts
    assert json.dumps(failure.to_dict()) == json.dumps(
        {"doc_id": "r/a.md", "path": "a.md", "error": "StoreUnavailable", "message": "down"})


def _code_argument(node: ast.Call) -> ast.expr | None:
    """The code argument of ``Failure(doc_id, path, error, ...)`` or the walk's
    ``problem(result, rel, path, error, ...)``, else None."""
    name = getattr(node.func, "id", None)
    index = {"Failure": 2, "problem": 3}.get(name or "")
    if index is None:
        return None
    keyword = next((k.value for k in node.keywords if k.arg == "error"), None)
    return keyword if keyword is not None else node.args[index] if len(node.args) > index else None


def test_failure_codes_in_the_source_are_members() -> None:
    """Every failure code written in the source (a literal, ``ErrorCode.X`` or
    ``SomeError.__name__``) names a member."""
    seen = 0
    for path, tree in _parsed():
        for node in ast.walk(tree):
            arg = _code_argument(node) if isinstance(node, ast.Call) else None
            if isinstance(arg, ast.Constant):
                code = arg.value
            elif isinstance(arg, ast.Attribute) and arg.attr == "__name__":
                code = getattr(arg.value, "id", "")  # InternalError.__name__
            elif isinstance(arg, ast.Attribute) and getattr(arg.value, "id", None) == "ErrorCode":
                code = arg.attr
            else:
                continue
            assert code in ErrorCode.__members__, f"{path}:{node.lineno}: {code!r}"
            seen += 1
    assert seen >= 8  # discovery's, the plan's and the stages' codes were all found


def test_disk_full_and_store_errors_are_not_retried() -> None:
    assert not issubclass(DiskFull, TransientError)  # space does not come back in seconds
    assert issubclass(StoreError, PermanentError) and issubclass(StoreError, StoreFailure)
    assert issubclass(StoreUnavailable, TransientError) and issubclass(StoreUnavailable, StoreFailure)


@pytest.mark.parametrize("cls", [EmbeddingTransientError, LLMTransientError, StoreUnavailable])
def test_retry_after_is_a_field(cls) -> None:
    assert cls("x").retry_after is None
    exc = cls("slow down", retry_after=2.5)
    assert exc.retry_after == 2.5 and str(exc) == "slow down"
    again = pickle.loads(pickle.dumps(exc))  # Prefect moves exceptions between processes
    assert type(again) is cls and again.retry_after == 2.5 and str(again) == "slow down"


@pytest.mark.parametrize("cls", sorted(set(_kinds()) - FAMILIES, key=lambda c: c.__name__))
def test_cli_exit_code_and_kind_are_unchanged(cls) -> None:
    exc = cls("/q.jsonl", [(1, "bad")]) if cls is errors.QueryFileError else cls("boom")
    code, kind, _ = cli_support.classify(exc)
    assert kind is ErrorCode[cls.__name__]
    want = cli_support.EXIT_USAGE if cls.__name__ in USAGE_KINDS else cli_support.EXIT_FAILED
    assert code == want
    assert issubclass(cls, UsageError) == (cls.__name__ in USAGE_KINDS)


def test_cli_error_object_codes_and_retry_after() -> None:
    code, kind, message = cli_support.classify(KeyboardInterrupt())
    assert kind is ErrorCode.Interrupted
    code, kind, message = cli_support.classify(ValueError("oops"))
    assert kind is ErrorCode.InternalError
    assert cli_support.error_object(kind, message) == {
        "error": {"kind": "InternalError", "message": "ValueError: oops"}}
    exc = EmbeddingTransientError("429", retry_after=3.0)
    code, kind, message = cli_support.classify(exc)
    obj = cli_support.error_object(kind, message, {"added": 1}, retry_after=exc.retry_after)
    assert json.dumps(obj) == ('{"added": 1, "error": {"kind": "EmbeddingTransientError", '
                               '"message": "429", "retry_after": 3.0}}')
