"""schemathesis hooks for :mod:`bench.harness.fuzz` (loaded by path through
``SCHEMATHESIS_HOOKS``): its ``negative_data_rejection`` as the wire carries the case.

A multipart form has no types: every field is text and a file part is bytes.
schemathesis's negative cases that only change a form field's JSON type (``collection``
made ``null``, ``file`` made ``false``) arrive as the text ``null`` or the bytes
``false``, which are a valid collection name and a valid file, so accepting them is
right; schemathesis 4.32 still calls that "schema-violating request accepted" (ST201)
when the form has a binary part it cannot re-validate. Every other negative case (a
pattern a field breaks, a bad query parameter or header, a JSON body) is checked as
schemathesis does.
"""

from __future__ import annotations

from typing import Any

import schemathesis
from schemathesis.core.mutations import OperatorKind
from schemathesis.core.parameters import ParameterLocation
from schemathesis.specs.openapi.checks import negative_data_rejection


def only_form_type_changes(case: Any) -> bool:
    """A negative case whose only mutations change the JSON type of multipart fields."""
    meta = case.meta
    if meta is None or not str(case.media_type or "").startswith("multipart/form-data"):
        return False
    mutations = getattr(meta.phase.data, "mutations", ())
    others = any(
        location != ParameterLocation.BODY and info.mode.is_negative
        for location, info in meta.components.items()
    )
    return (
        bool(mutations)
        and not others
        and all(
            m.operator == OperatorKind.CHANGE_TYPE
            and m.parameter_location == ParameterLocation.BODY
            for m in mutations
        )
    )


@schemathesis.check
def negative_data_rejection_on_the_wire(ctx: Any, response: Any, case: Any) -> bool | None:
    """``negative_data_rejection``, but not for a form's type changes (see the module)."""
    if only_form_type_changes(case):
        return None
    result: bool | None = negative_data_rejection(ctx, response, case)
    return result
