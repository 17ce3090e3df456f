"""Spreading a hot queue (the hot-queue how-to; run by the test suite)."""

from __future__ import annotations

from awa_django import PartitionedQueue, job

# [partitioned]
# myapp/jobs.py -- declared at import, so every process knows the layout.
billing = PartitionedQueue("billing", partitions=4)  # billing:0 .. billing:3


@job(queue="billing")
def charge(customer_id: int, cents: int) -> None:
    """Charge one customer."""


def charge_later(customer_id: int, cents: int):
    # Every job of one customer lands on the same partition, in order.
    return charge.using(queue=billing.route_by_key(customer_id)).enqueue(customer_id, cents)


# [/partitioned]
