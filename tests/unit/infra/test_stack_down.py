"""`rtrl down` stops what a state dir recorded, whatever the config it is given now."""

import sys

from infra.stack.broker import Broker
from infra.stack.config import KafkaConfig
from infra.stack.process import ManagedProcess


def test_stopping_the_broker_stops_a_recorded_object_store_even_under_memory_storage(tmp_path):
    store = ManagedProcess("objectstore", tmp_path)
    store.start([sys.executable, "-c", "import time; time.sleep(120)"])
    assert store.is_running()
    assert Broker(KafkaConfig(storage_engine="memory"), tmp_path).stop() is True
    assert not store.is_running() and store.info() is None
