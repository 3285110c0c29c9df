"""Sharded replicas: each (model, schedule slot) lease has exactly one holder, on both backends."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor.store import Store
from tests.databases import BACKENDS, database_url


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    with database_url(request.param, tmp_path, request) as url, Store(url) as store:
        store.upgrade()
        yield store


def test_the_first_claim_of_a_slot_wins_and_every_other_is_refused(store: Store) -> None:
    assert store.claim("resnet", 100, "pod-a")
    assert not store.claim("resnet", 100, "pod-b")
    assert not store.claim("resnet", 100, "pod-a"), "a slot is run once, even by its holder"
    assert store.claim("resnet", 101, "pod-b"), "the next slot is free again"
    assert store.claim("bert", 100, "pod-b"), "models do not share slots"


def test_racing_replicas_get_exactly_one_winner_per_slot(store: Store) -> None:
    wins: list[tuple[str, int]] = []
    guard = threading.Lock()

    def replica(name: str) -> None:
        for slot in range(20):
            if store.claim("resnet", slot, name):
                with guard:
                    wins.append((name, slot))

    threads = [threading.Thread(target=replica, args=(f"pod-{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(slot for _, slot in wins) == list(range(20))
