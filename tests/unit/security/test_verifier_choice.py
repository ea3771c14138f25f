"""Which verifier process a signature goes to (security.verifier `_worker_for`): an awake one
while its queue is short, so that another can stay asleep; the least busy once it is not."""

from __future__ import annotations

from typing import Any, cast

from bankrail.security.verifier import _AWAKE_QUEUE, _Worker, _worker_for


def _workers(*queued: int) -> list[_Worker]:
    workers = []
    for count in queued:
        worker = _Worker(process=cast(Any, None), writer=cast(Any, None))
        worker.pending = {n: (b"", b"", ()) for n in range(count)}
        workers.append(worker)
    return workers


def test_with_nothing_queued_the_first_worker_takes_it() -> None:
    workers = _workers(0, 0)
    assert _worker_for(workers) is workers[0]


def test_a_worker_with_work_queued_takes_more_while_another_sleeps() -> None:
    for queued in range(1, _AWAKE_QUEUE):
        workers = _workers(0, queued)
        assert _worker_for(workers) is workers[1]


def test_a_full_queue_sends_the_next_to_the_least_busy() -> None:
    workers = _workers(_AWAKE_QUEUE, 0)
    assert _worker_for(workers) is workers[1]
    workers = _workers(_AWAKE_QUEUE + 3, _AWAKE_QUEUE)
    assert _worker_for(workers) is workers[1]


def test_of_two_awake_workers_the_busier_takes_it() -> None:
    workers = _workers(1, _AWAKE_QUEUE - 1, 0)
    assert _worker_for(workers) is workers[1]
