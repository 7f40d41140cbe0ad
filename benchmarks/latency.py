"""The latency model the proxy adds to every S3 request in the benchmarks.

Loopback S3 answers in a millisecond, which would make every remote write look free. The model
adds, before a request is forwarded to moto:

    delay = first_byte + body_bytes / bandwidth,   first_byte ~ LogNormal(ln(median), sigma)

and, with probability `tail_probability`, multiplies that delay by `tail_factor` (a heavy
tail: the rare request that is many times slower than the rest). Only request bodies pay the
bandwidth term (uploads); downloads pay the first-byte delay and the real loopback transfer.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, fields
from typing import Any, Protocol


class _Request(Protocol):
    @property
    def content_length(self) -> int | None: ...


@dataclass
class LatencyModel:
    """Seeded, so two runs draw the same delays in the same order."""

    first_byte_median: float = 0.020
    first_byte_sigma: float = 0.35
    bandwidth: float | None = 200e6
    tail_probability: float = 0.0
    tail_factor: float = 10.0
    seed: int = 0
    _random: random.Random = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.first_byte_median < 0 or self.first_byte_sigma < 0:
            raise ValueError("first_byte_median and first_byte_sigma must not be negative")
        if self.bandwidth is not None and self.bandwidth <= 0:
            raise ValueError("bandwidth must be positive (or None for unlimited)")
        if not 0.0 <= self.tail_probability <= 1.0 or self.tail_factor < 1.0:
            raise ValueError("tail_probability must be in [0, 1] and tail_factor >= 1")
        self._random = random.Random(self.seed)

    def __call__(self, info: _Request) -> float:
        delay = 0.0
        if self.first_byte_median > 0:
            delay = self._random.lognormvariate(math.log(self.first_byte_median),
                                                self.first_byte_sigma)
        if self.bandwidth is not None and info.content_length:
            delay += info.content_length / self.bandwidth
        if self.tail_probability and self._random.random() < self.tail_probability:
            delay *= self.tail_factor
        return delay

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.init}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LatencyModel:
        names = {f.name for f in fields(cls) if f.init}
        return cls(**{k: v for k, v in data.items() if k in names})

    def describe(self) -> str:
        parts = [f"first byte lognormal(median {self.first_byte_median * 1000:g} ms, "
                 f"sigma {self.first_byte_sigma:g})"]
        if self.bandwidth is not None:
            parts.append(f"+ body / {self.bandwidth / 1e6:g} MB/s")
        if self.tail_probability:
            parts.append(f"x{self.tail_factor:g} for {self.tail_probability:.1%} of requests")
        return " ".join(parts)
