"""What a schema id costs a PySpark processor's state value, and reading older values lazily
vs rewriting them all at a schema change (docs/operations.md, "Changing a processor").

    python -m benchmarks.schema_ids [--values 100000] [--repeats 7]

One value state schema of five fields (int, string, int, boolean, float), values encoded as
the compat path stores them: without an id (as before ids existed), with one, and read back
with the codec of their own id or of a later schema (reordered, a widened int and float, a
removed and an added field). "eager" is what rewriting every value at the change would cost
per value: read, project, write back. Microseconds per value, the best of the repeats, on one
core; no storage involved.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from pyspark.sql import types as T

from pyspark_dstl.spark.codec.evolution import VersionedRowCodec
from pyspark_dstl.spark.codec.typed_values import RowCodec
from pyspark_dstl.spark.codec.values import decode_value, encode_value

OLD = T.StructType([T.StructField("id", T.IntegerType()), T.StructField("name", T.StringType()),
                    T.StructField("count", T.IntegerType()),
                    T.StructField("active", T.BooleanType()),
                    T.StructField("score", T.FloatType())])
NEW = T.StructType([T.StructField("name", T.StringType()), T.StructField("id", T.LongType()),
                    T.StructField("score", T.DoubleType()),
                    T.StructField("extra", T.StringType())])


def best_us(action: Callable[[], Any], count: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return min(times) / count * 1e6


def measure(count: int, repeats: int) -> dict[str, float]:
    values = [(i, f"name-{i}", i % 7, i % 2 == 0, 1.5) for i in range(count)]
    plain = RowCodec(OLD, "v")
    tagged = VersionedRowCodec(OLD, "v", 1, {1: OLD})
    later = VersionedRowCodec(NEW, "v", 2, {1: OLD, 2: NEW})
    raw_plain = [encode_value(plain.encode(v), None, "v") for v in values]
    raw_tagged = [encode_value(tagged.encode(v), None, "v") for v in values]

    def read(codec: RowCodec, raws: list[bytes]) -> list[Any]:
        return [codec.decode(decode_value(r, 0, "v")[1]) for r in raws]

    def rewrite() -> list[bytes]:
        return [encode_value(later.encode(value), None, "v") for value in read(later, raw_tagged)]

    return {
        "bytes_without_id": sum(map(len, raw_plain)) / count,
        "bytes_with_id": sum(map(len, raw_tagged)) / count,
        "encode_without_id_us": best_us(
            lambda: [encode_value(plain.encode(v), None, "v") for v in values], count, repeats),
        "encode_with_id_us": best_us(
            lambda: [encode_value(tagged.encode(v), None, "v") for v in values], count, repeats),
        "decode_without_id_us": best_us(lambda: read(plain, raw_plain), count, repeats),
        "decode_own_id_us": best_us(lambda: read(tagged, raw_tagged), count, repeats),
        "decode_older_id_us": best_us(lambda: read(later, raw_tagged), count, repeats),
        "eager_rewrite_us": best_us(rewrite, count, repeats),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    figures = measure(args.values, args.repeats)
    if args.json:
        print(json.dumps(figures, indent=1))
        return
    for name, value in figures.items():
        print(f"{name:24s} {value:8.2f}")


if __name__ == "__main__":
    main()
