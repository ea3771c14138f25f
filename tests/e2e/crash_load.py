"""A mixed merchant load for the crash-recovery test: top-ups, v1 and v3 payouts and pay-ins
through the headless mock bank, sent by a few threads that behave as real clients do.

A request that gets no answer (the server died under it, or is still starting) is sent again
with the same idempotency key or `transaction_id` until it is answered; each operation records
what it asked for and what the service accepted, so that the test can recompute the balances
on its own afterwards. Now and then a thread also re-sends an operation that was already
answered (a client that lost the answer), which must give the same answer and create nothing.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from pay_in_helpers import bank_action, next_action, payment_body

from support.api import MerchantClient, Operator

GB_IBAN = "GB29NWBK60161331926819"
DE_IBAN = "DE89370400440532013000"
PROVIDERS = {"GBP": "mock-payments-gb-redirect", "EUR": "mock-payments-de-redirect"}
RETURN_URI = "https://shop.example/back"
HUGE = 10**12  # more than every top-up of a run together: always insufficient_funds
# Sandbox reference tokens (docs/sandbox.md), at most 18 characters for v1; "" is the default.
PAYOUT_TOKENS = ["", "", "", "", "delay:40", "fail:scheme_error", "fail:server_error"]
PAYOUT_TOKENS_V3 = [*PAYOUT_TOKENS, "fail:invalid_iban"]
# The payer's decision at the mock bank, and the payment's terminal status and failure reason.
BANK_ACTIONS = {
    "Execute": ("payment_settled", None),
    "RejectAuthorisation": ("payment_failed", "authorization_failed"),
    "RejectExecution": ("payment_failed", "provider_rejected"),
    "Cancel": ("payment_failed", "not_authorized"),
}
# Answers that mean "not decided, send it again": the server is down, starting, or the first
# copy of the request still holds its key.
RETRY_STATUSES = {409, 500, 502, 503, 504}
CONCURRENCY_CONFLICT = "Idempotency-Key Concurrency Conflict"


class LoadFailure(AssertionError):
    """The service answered a load request in a way no correct service may."""


@dataclass
class Operation:
    """One operation of the load: what was asked, and what was accepted."""

    kind: str  # "topup", "v1_payout", "v3_payout" or "pay_in"
    currency: str
    amount: int
    key: str  # the idempotency key (v1: the transaction_id)
    body: dict[str, Any]
    token: str = ""  # payouts: the sandbox reference token, or "huge"
    action: str = ""  # pay-ins: the payer's decision at the mock bank
    delays: dict[str, int] = field(default_factory=dict)
    object_id: str | None = None  # the id of what the 2xx answer created
    answer: Any = None  # the 2xx answer's body (a replay must get the same)
    sends: int = 0  # how many times its creating request was sent


class Clients:
    """A thread's own HTTP clients (httpx clients are not shared between threads)."""

    def __init__(self, merchant: MerchantClient, base_url: str, admin_token: str) -> None:
        self.merchant = MerchantClient(
            base_url=base_url,
            merchant_id=merchant.merchant_id,
            client_id=merchant.client_id,
            client_secret=merchant.client_secret,
            kid=merchant.kid,
            private_key_pem=merchant.private_key_pem,
            accounts=merchant.accounts,
        )
        self.operator = Operator(base_url, admin_token)

    def close(self) -> None:
        self.merchant.http.close()
        self.operator.close()


class CrashLoad:
    """Drives the load from `threads` threads until `stop()`; counts requests sent."""

    def __init__(
        self,
        base_url: str,
        admin_token: str,
        merchant: MerchantClient,
        *,
        seed: int,
        threads: int = 4,
        retry_for: float = 60.0,
    ) -> None:
        self.base_url = base_url
        self.admin_token = admin_token
        self.merchant = merchant
        self.seed = seed
        self.retry_for = retry_for
        self.operations: list[Operation] = []
        self.errors: list[BaseException] = []
        self.replays = 0
        self.unanswered = 0  # sends that got no answer (or a retryable one)
        self.cut_off = 0  # sends that reached the server and lost their answer in a crash
        self._sent = 0
        self._lock = threading.Lock()
        self._progress = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(index,), name=f"crash-load-{index}")
            for index in range(threads)
        ]

    # --- control ------------------------------------------------------------------------------

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float) -> None:
        """Let every thread finish the operation it is on (retrying as needed), then end."""
        self._stopping.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self._threads if t.is_alive()]
        assert not alive, f"load threads still running after {timeout}s: {alive}"

    @property
    def sent(self) -> int:
        with self._lock:
            return self._sent

    def wait_sent(self, count: int, timeout: float) -> None:
        """Block until `count` requests have been sent in all (a moment to kill the server)."""
        with self._progress:
            done = self._progress.wait_for(
                lambda: self._sent >= count or bool(self.errors), timeout=timeout
            )
        assert done, f"the load sent only {self.sent} of {count} requests in {timeout}s"
        self.raise_errors()

    def raise_errors(self) -> None:
        if self.errors:
            raise self.errors[0]

    def accepted(self, kind: str) -> list[Operation]:
        """Operations of `kind` that the service accepted with a 2xx."""
        return [op for op in self.operations if op.kind == kind and op.object_id is not None]

    # --- sending ------------------------------------------------------------------------------

    def send(self, what: str, request: Callable[[], httpx.Response]) -> httpx.Response:
        """Send until answered: a request without an answer is sent again, unchanged."""
        deadline = time.monotonic() + self.retry_for
        while True:
            with self._progress:
                self._sent += 1
                self._progress.notify_all()
            try:
                answer = request()
            except (httpx.ConnectError, httpx.HTTPStatusError):
                answer = None  # the server is down or starting, or the token call failed
            except httpx.TransportError:
                answer = None  # sent, then the connection died: the server was killed under it
                with self._lock:
                    self.cut_off += 1
            if answer is not None and not _retryable(answer):
                return answer
            with self._lock:
                self.unanswered += 1
            if time.monotonic() > deadline:
                detail = "no answer" if answer is None else f"{answer.status_code} {answer.text}"
                raise LoadFailure(f"{what}: still {detail} after {self.retry_for}s")
            time.sleep(0.05)  # a client's back-off before trying again

    def _expect(self, what: str, answer: httpx.Response, status: int) -> Any:
        if answer.status_code != status:
            raise LoadFailure(f"{what}: expected {status}, got {answer.status_code} {answer.text}")
        if "json" not in answer.headers.get("content-type", ""):
            return answer.text  # the mock bank's headless action: the return URL as plain text
        return answer.json()

    # --- the threads --------------------------------------------------------------------------

    def _run(self, index: int) -> None:
        rng = random.Random(self.seed * 1_000 + index)
        clients = Clients(self.merchant, self.base_url, self.admin_token)
        try:
            self.top_up(clients, "GBP", 60_000)
            self.top_up(clients, "EUR", 60_000)
            while not self._stopping.is_set() and not self.errors:
                roll = rng.random()
                if roll < 0.22:
                    self.top_up(clients, rng.choice(["GBP", "EUR"]), rng.randint(500, 9_000))
                elif roll < 0.47:
                    self.v1_payout(clients, rng)
                elif roll < 0.72:
                    self.v3_payout(clients, rng)
                elif roll < 0.90:
                    self.pay_in(clients, rng)
                else:
                    self.replay(clients, rng)
        except BaseException as exc:  # reported by the test, with the others
            with self._progress:
                self.errors.append(exc)
                self._progress.notify_all()
        finally:
            clients.close()

    def _record(self, op: Operation) -> Operation:
        with self._lock:
            self.operations.append(op)
        return op

    def top_up(self, clients: Clients, currency: str, amount: int) -> None:
        account = self.merchant.accounts[currency]
        iban = next(i["iban"] for i in account["account_identifiers"] if i["type"] == "iban")
        reference = f"crash-{uuid.uuid4()}"  # identifies the top-up in its topup_received event
        body = {
            "iban": iban,
            "amount_in_minor": amount,
            "currency": currency,
            "remitter_name": "Crash Test Ltd",
            "reference": reference,
        }
        op = self._record(Operation("topup", currency, amount, str(uuid.uuid4()), body))
        self._create(op, 201, lambda: self._send_top_up(clients, op))

    def _send_top_up(self, clients: Clients, op: Operation) -> httpx.Response:
        return clients.operator.post(
            "/sandbox/bank-transfers", op.body, **{"Idempotency-Key": op.key}
        )

    def _payout_amount(self, rng: random.Random, token: str) -> tuple[str, int]:
        if rng.random() < 0.1:
            return "huge", HUGE
        return token, rng.randint(100, 4_000)

    def v1_payout(self, clients: Clients, rng: random.Random) -> None:
        currency = rng.choice(["GBP", "EUR"])
        token, amount = self._payout_amount(rng, rng.choice(PAYOUT_TOKENS))
        transaction_id = str(uuid.uuid4())
        body = {
            "transaction_id": transaction_id,
            "beneficiary_name": "Jane Doe",
            "beneficiary_iban": GB_IBAN if currency == "GBP" else DE_IBAN,
            "beneficiary_reference": token if token not in ("", "huge") else "crash load",
            "currency": currency,
            "amount_in_minor": amount,
            "context_code": "withdrawal",
        }
        op = self._record(Operation("v1_payout", currency, amount, transaction_id, body, token))
        self._create(op, 202, lambda: self._send_v1(clients, op))

    def _send_v1(self, clients: Clients, op: Operation) -> httpx.Response:
        return clients.merchant.signed_post(
            "/v1/payouts", op.body, idempotency_key=None, signature_header="X-SVC-Signature"
        )

    def v3_payout(self, clients: Clients, rng: random.Random) -> None:
        currency = rng.choice(["GBP", "EUR"])
        token, amount = self._payout_amount(rng, rng.choice(PAYOUT_TOKENS_V3))
        identifier = (
            {
                "type": "sort_code_account_number",
                "sort_code": "560029",
                "account_number": "26207729",
            }
            if currency == "GBP"
            else {"type": "iban", "iban": DE_IBAN}
        )
        body = {
            "merchant_account_id": self.merchant.accounts[currency]["id"],
            "amount_in_minor": amount,
            "currency": currency,
            "beneficiary": {
                "type": "external_account",
                "reference": token if token not in ("", "huge") else "crash load",
                "account_holder_name": "Jane Doe",
                "account_identifier": identifier,
            },
            "metadata": {"load": "crash"},
        }
        op = self._record(Operation("v3_payout", currency, amount, str(uuid.uuid4()), body, token))
        self._create(op, 202, lambda: self._send_v3(clients, op))

    def _send_v3(self, clients: Clients, op: Operation) -> httpx.Response:
        return clients.merchant.signed_post("/v3/payouts", op.body, idempotency_key=op.key)

    def pay_in(self, clients: Clients, rng: random.Random) -> None:
        currency = rng.choice(["GBP", "EUR"])
        action = rng.choices(list(BANK_ACTIONS), weights=[6, 1, 1, 1])[0]
        delays = (
            {"execution_delay_in_seconds": 30, "settlement_delay_in_seconds": 30}
            if action == "Execute" and rng.random() < 0.3
            else {}
        )
        amount = rng.randint(100, 5_000)
        body = payment_body(self.merchant, currency, amount, provider_id=PROVIDERS[currency])
        body["user"] = {"id": f"crash-user-{rng.randint(1, 5)}", "name": "Pat Payer"}
        op = Operation("pay_in", currency, amount, str(uuid.uuid4()), body, action=action)
        op.delays = delays
        self._record(op)
        flow_key = str(uuid.uuid4())
        created = self._create(op, 201, lambda: self._send_payment(clients, op))
        payment_id = str(created["id"])
        flow_path = f"/v3/payments/{payment_id}/authorization-flow"
        flow_body = {"provider_selection": {}, "redirect": {"return_uri": RETURN_URI}}
        answer = self.send(
            f"authorization flow of {payment_id}",
            lambda: clients.merchant.signed_post(flow_path, flow_body, idempotency_key=flow_key),
        )
        step = next_action(self._expect(f"authorization flow of {payment_id}", answer, 200))
        if step["type"] != "redirect":
            raise LoadFailure(f"payment {payment_id}: expected a redirect, got {step}")
        answer = self.send(
            f"mock bank {action} of {payment_id}",
            lambda: bank_action(clients.merchant.http, payment_id, step["uri"], action, **delays),
        )
        self._expect(f"mock bank {action} of {payment_id}", answer, 202)

    def _send_payment(self, clients: Clients, op: Operation) -> httpx.Response:
        return clients.merchant.signed_post("/v3/payments", op.body, idempotency_key=op.key)

    def _create(self, op: Operation, status: int, request: Callable[[], httpx.Response]) -> Any:
        """Send the operation's creating request until answered; record the 2xx answer."""

        def counted() -> httpx.Response:
            op.sends += 1
            return request()

        what = f"{op.kind} {op.key}"
        created = self._expect(what, self.send(what, counted), status)
        op.answer = created
        op.object_id = str(created.get("id") or created.get("transaction_id"))
        return created

    # --- lost answers -------------------------------------------------------------------------

    def replay(self, clients: Clients, rng: random.Random) -> None:
        """Re-send an operation that was already answered, as a client that lost the answer."""
        with self._lock:
            done = [op for op in self.operations if op.answer is not None]
        if done:
            self.replay_one(clients, rng.choice(done))

    def replay_one(self, clients: Clients, op: Operation) -> None:
        senders: dict[str, tuple[int, Callable[[], httpx.Response]]] = {
            "topup": (201, lambda: self._send_top_up(clients, op)),
            "v1_payout": (202, lambda: self._send_v1(clients, op)),
            "v3_payout": (202, lambda: self._send_v3(clients, op)),
            "pay_in": (201, lambda: self._send_payment(clients, op)),
        }
        status, request = senders[op.kind]
        what = f"replay of {op.kind} {op.key}"
        again = self._expect(what, self.send(what, request), status)
        if again != op.answer:
            raise LoadFailure(f"{what}: first answered {op.answer}, now {again}")
        with self._lock:
            self.replays += 1

    def replay_all(self) -> None:
        """Re-send every answered operation once more (after the last restart)."""
        clients = Clients(self.merchant, self.base_url, self.admin_token)
        try:
            for op in list(self.operations):
                if op.answer is not None:
                    self.replay_one(clients, op)
        finally:
            clients.close()


def _retryable(answer: httpx.Response) -> bool:
    if answer.status_code not in RETRY_STATUSES:
        return False
    if answer.status_code != 409:
        return True
    # Only the in-flight conflict is "try again": another 409 is a real answer.
    try:
        title = answer.json().get("title")
    except ValueError:
        return False
    return title == CONCURRENCY_CONFLICT
