"""runtime.stage.Pipeline: stages run in the order given, names are unique, an unknown
stage is a configuration error."""

from __future__ import annotations

import pytest

from bench.harness.pipelines import STAGES, ScriptedStage
from runtime.errors import ConfigurationError
from runtime.stage import Pipeline


def test_pipeline_order_and_validation() -> None:
    pipeline = Pipeline(stages=[ScriptedStage(s) for s in STAGES])
    assert pipeline.next_stage("parse") == "chunk" and pipeline.next_stage("index") is None
    with pytest.raises(ConfigurationError):
        Pipeline(stages=[ScriptedStage("a"), ScriptedStage("a")])
    with pytest.raises(ConfigurationError):
        pipeline.stage("nope")
