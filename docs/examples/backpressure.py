"""Producers that slow down when workers fall behind (the backpressure how-to;
run by the test suite)."""

from __future__ import annotations

from collections.abc import Iterable

from awa_django import QueueFull, enqueue_many, job, ops


@job(queue="thumbnails")
def make_thumbnail(image_id: int) -> None:
    """Render the image's thumbnails."""


# [import]
def import_images(image_ids: Iterable[int], batch_size: int = 500) -> int:
    """Queue a thumbnail job per image, never letting more than 5,000 wait."""
    ids = list(image_ids)
    queued = 0
    for start in range(0, len(ids), batch_size):
        batch = [make_thumbnail.prepare(image_id) for image_id in ids[start : start + batch_size]]
        # Waits (up to 10 minutes) while "thumbnails" holds more than 5,000
        # available jobs, then writes the batch with one COPY.
        enqueue_many(batch, max_queue_depth=5_000, wait=600)
        queued += len(batch)
    return queued


# [/import]


# [request]
def thumbnail_later(image_id: int) -> bool:
    """From a request: queue the job unless the queue is swamped (no waiting)."""
    try:
        enqueue_many([make_thumbnail.prepare(image_id)], max_queue_depth=5_000)
    except QueueFull as full:
        print(f"{full.queue} is {full.depth} jobs deep; try again later")
        return False
    return True


# [/request]


# [async]
async def feed_thumbnails(image_ids: list[int]) -> None:
    """An async producer: wait on the event loop, then enqueue."""
    await ops.await_for_room("thumbnails", max_depth=5_000, timeout=600)
    for image_id in image_ids:
        await make_thumbnail.aenqueue(image_id)


# [/async]
