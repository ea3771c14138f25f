"""A server's /metrics, as the tests read it: parsed with the Prometheus client's own parser."""

from __future__ import annotations

import collections

import httpx
from prometheus_client.parser import text_string_to_metric_families


class Scrape:
    """One /metrics answer, parsed with the Prometheus client's own parser."""

    def __init__(self, answer: httpx.Response) -> None:
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"].startswith("text/plain")
        self.answer = answer
        self.text = answer.text
        self.samples = [
            sample
            for family in text_string_to_metric_families(self.text)
            for sample in family.samples
        ]

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples called `name` carrying these labels (0 when none)."""
        return sum(
            s.value
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )

    def labels(self, name: str, label: str) -> dict[str, float]:
        """The values of `name` by one label, summed over the others."""
        found: dict[str, float] = collections.defaultdict(float)
        for s in self.samples:
            if s.name == name:
                found[s.labels[label]] += s.value
        return dict(found)


def scrape_metrics(base_url: str, token: str | None = None) -> Scrape:
    """The server's /metrics now (with the operator's `token` where it asks for one)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Scrape(httpx.get(f"{base_url}/metrics", headers=headers, timeout=30))
