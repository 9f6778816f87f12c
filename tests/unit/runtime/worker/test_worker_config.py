"""runtime.worker.config: a worker's stages, slots, lease and heartbeat are validated, and
the heartbeat follows the lease."""

from __future__ import annotations

import pytest

from runtime.errors import ConfigurationError
from runtime.worker.config import WorkerConfig


def test_worker_config_validation() -> None:
    with pytest.raises(ConfigurationError):
        WorkerConfig(stages=(), concurrency={})
    with pytest.raises(ConfigurationError):
        WorkerConfig(stages=("parse",), concurrency={"parse": 0})
    with pytest.raises(ConfigurationError):
        WorkerConfig(stages=("parse",), concurrency={"parse": 1}, lease_s=5, heartbeat_s=5)
    assert (
        WorkerConfig(stages=("parse",), concurrency={"parse": 1}, lease_s=30).heartbeat_every_s
        == 10
    )
