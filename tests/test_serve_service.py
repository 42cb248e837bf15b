"""serve's Service in a process of its own choosing (the library API, a test): the garbage
collector's freeze it takes for its life (what is alive after its first reading kept out of full
collections) is undone when it closes, also with two Services in one process, and a heap the
caller froze is left as the caller froze it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

import vramkit
from vramkit.serve.service import Options, Service


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    gc.unfreeze()  # whatever an earlier test in this worker left
    yield
    gc.unfreeze()


def running() -> Service:
    service = Service(vramkit.open_machine("demo"), Options(interval=3600.0, xids=False))
    service.start()
    assert service.wait_for_first(30)
    return service


def test_the_heap_is_frozen_while_it_serves_and_thawed_when_it_stops():
    service = running()
    try:
        assert gc.get_freeze_count() > 0
    finally:
        service.close()
    assert gc.get_freeze_count() == 0


def test_two_services_thaw_it_when_the_last_one_stops():
    first = running()
    second = running()
    try:
        first.close()
        assert gc.get_freeze_count() > 0  # the second still serves
    finally:
        second.close()
        first.close()
    assert gc.get_freeze_count() == 0
    # A third, after them: frozen and thawed again.
    third = running()
    third.close()
    assert gc.get_freeze_count() == 0


def test_a_heap_the_caller_froze_stays_as_the_caller_froze_it():
    gc.freeze()
    mine = gc.get_freeze_count()
    service = running()
    service.close()
    # Neither thawed (0) nor frozen again on top (the Service's own thousands of objects added). A
    # frozen object still dies when its last reference goes, so the count may fall by a few
    # (677,977 -> 677,975 in one CI run).
    assert 0 < gc.get_freeze_count() <= mine
