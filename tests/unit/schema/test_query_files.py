"""schema.parse: a query file's ``-- name:`` sections, each name once."""

from __future__ import annotations

import pytest

import schema


def test_query_file_parsing() -> None:
    text = "-- name: a\n-- purpose\nSELECT 1;\n\n-- name: b\nSELECT 2;\n"
    assert schema.parse(text) == {"a": "-- purpose\nSELECT 1;", "b": "SELECT 2;"}
    with pytest.raises(ValueError):
        schema.parse("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n")
