"""Jobs that wait for another system (the callbacks how-to; run by the test suite).

``payments`` and ``cloud`` stand in for the clients of the other systems:
they only record what they were asked, so the tests can read the callback
id a job handed over and answer it, as the real system would.
"""

from __future__ import annotations

from typing import Any

# [charge]
from awa_django import JobContext, WaitForCallback, job


@job(takes_context=True)
def charge(ctx: JobContext, order_id: int) -> None:
    callback_id = ctx.register_callback(timeout=3600)
    payments.start_charge(order_id, reply_to=str(callback_id))
    raise WaitForCallback()


# [/charge]


# [provision]
@job(takes_context=True)
def provision(ctx: JobContext, account_id: int) -> str:
    callback_id = ctx.register_callback(timeout=600)
    cloud.request_machine(account_id, reply_to=str(callback_id))
    machine = ctx.wait_for_callback(callback_id, timeout=600)
    configure(machine)
    return machine["id"]


# [/provision]


# --- stand-ins for the other systems ---------------------------------------


class PaymentProvider:
    """The payment provider's client: records the charges it was asked to start."""

    def __init__(self) -> None:
        self.charges: list[dict[str, Any]] = []

    def start_charge(self, order_id: int, *, reply_to: str) -> None:
        # A real client asks the provider to charge the order and to answer
        # reply_to (through the HTTP receiver) once the charge is settled.
        self.charges.append({"order_id": order_id, "reply_to": reply_to})


class CloudProvider:
    """The cloud's client: records the machines it was asked for."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def request_machine(self, account_id: int, *, reply_to: str) -> None:
        self.requests.append({"account_id": account_id, "reply_to": reply_to})


payments = PaymentProvider()
cloud = CloudProvider()
configured: list[dict[str, Any]] = []


def configure(machine: dict[str, Any]) -> None:
    """Set the new machine up (here: remember it)."""
    configured.append(machine)
