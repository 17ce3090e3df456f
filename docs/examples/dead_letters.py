"""The dead-letter queue (the dead-letters how-to; run by the test suite)."""

from __future__ import annotations

from awa_django import TerminalError, job, ops

# [settings]
AWA = {
    "DLQ_ENABLED_BY_DEFAULT": False,  # the default for every queue
    "QUEUE_DLQ": {"payments": True},  # per queue, overriding it
}
# [/settings]

# Stands in for the payment provider: the orders whose card it declines.
DECLINED_ORDERS: set[int] = set()


@job(queue="payments", max_attempts=5)
def capture_payment(order_id: int) -> str:
    """Capture the payment of an order; a declined card is not worth retrying."""
    if order_id in DECLINED_ORDERS:
        raise TerminalError(f"order {order_id}: card declined")
    return f"order {order_id} captured"


# [inspect]
def print_dead_letters() -> None:
    for entry in ops.dlq_list(queue="payments", limit=20):
        print(entry.job_id, entry.kind, entry.reason, entry.moved_at)
        print(entry.errors[-1]["traceback"])


# [/inspect]


# [edit]
def charge_the_right_order(job_id: int, order_id: int) -> None:
    """The job was enqueued with the wrong order id: run it for the right one."""
    ops.edit_and_retry(job_id, [order_id], actor="support@example.com")


# [/edit]
