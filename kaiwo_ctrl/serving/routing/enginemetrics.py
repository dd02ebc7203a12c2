"""Parse an engine's Prometheus text for the figures routing uses.

The input is a model Pod's answer, so it is untrusted: the caller bounds its
size (the scraper reads at most ``max_bytes``), and this parse is one linear
pass over the lines that start with a known name; everything else is skipped
unread. Values that are not finite, negative or absurd are refused (the
sample as a whole, so a lying engine falls back to the proxy's own counts
rather than steering traffic with a bogus figure). Adapter names are bounded
in count and length.

Names read (vLLM first; SGLang's equivalents from the Gateway API Inference
Extension's model-server protocol; llama.cpp's ``llama-server --metrics``):

* running requests: ``vllm:num_requests_running``, ``sglang:num_running_reqs``,
  ``llamacpp:requests_processing``;
* waiting requests: ``vllm:num_requests_waiting``, ``sglang:num_queue_reqs``,
  ``llamacpp:requests_deferred``;
* KV-cache use (0..1): ``vllm:kv_cache_usage_perc``, the older
  ``vllm:gpu_cache_usage_perc``, ``sglang:token_usage``, and older llama-server
  builds' ``llamacpp:kv_cache_usage_ratio`` (current ones report no KV figure);
* adapters: the ``running_lora_adapters`` label of ``vllm:lora_requests_info``
  (the series with the newest value -- vLLM sets it to the time of the change).

Several series of one name (data-parallel engines, label ``engine``) are
summed for requests; the KV-cache use is their maximum.
"""

from __future__ import annotations

import math
import re

from kaiwo_ctrl.serving.routing.score import EngineSample

RUNNING = (b"vllm:num_requests_running", b"sglang:num_running_reqs", b"llamacpp:requests_processing")
WAITING = (b"vllm:num_requests_waiting", b"sglang:num_queue_reqs", b"llamacpp:requests_deferred")
KV = (b"vllm:kv_cache_usage_perc", b"vllm:gpu_cache_usage_perc", b"sglang:token_usage", b"llamacpp:kv_cache_usage_ratio")
LORA = b"vllm:lora_requests_info"
_KINDS = {**{n: "running" for n in RUNNING}, **{n: "waiting" for n in WAITING}, **{n: "kv" for n in KV}, LORA: "lora"}
_FIRST = frozenset(n[:1] for n in _KINDS)

MAX_REQUESTS = 1_000_000.0  # more running or waiting requests than this is a lie
MAX_ADAPTERS = 64
MAX_ADAPTER_NAME = 253
_LORA_LABEL = re.compile(rb'running_lora_adapters="([^"\\]{0,16384})"')


class BadMetrics(ValueError):
    """The answer names a known series with a value that cannot be true."""


def _split(line: bytes) -> tuple[bytes, bytes, float] | None:
    """(name, labels, value) of a sample line, or None when it is not one."""
    brace = line.find(b"{")
    if brace >= 0:
        end = line.rfind(b"}")
        if end < brace:
            return None
        name, labels, rest = line[:brace], line[brace + 1:end], line[end + 1:]
    else:
        name, _, rest = line.partition(b" ")
        labels = b""
    fields = rest.split()
    if not fields:
        return None
    try:
        value = float(fields[0])
    except ValueError:
        return None
    return name.strip(), labels, value


def _adapters(labels: bytes) -> frozenset[str]:
    m = _LORA_LABEL.search(labels)
    if not m or not m.group(1):
        return frozenset()
    names = m.group(1).split(b",", MAX_ADAPTERS)[:MAX_ADAPTERS]
    return frozenset(n.decode("utf-8", "replace").strip() for n in names if 0 < len(n.strip()) <= MAX_ADAPTER_NAME)


def parse_engine_metrics(body: bytes) -> EngineSample | None:
    """The sample in ``body``, or None when it reports neither running nor waiting requests.

    Raises :class:`BadMetrics` for a known series with an impossible value.
    """
    sums = {"running": 0.0, "waiting": 0.0}
    seen: set[str] = set()
    kv: dict[bytes, float] = {}
    lora: tuple[float, frozenset[str]] | None = None
    for line in body.split(b"\n"):
        if not line or line[:1] not in _FIRST:
            continue
        parts = _split(line)
        if parts is None:
            continue
        name, labels, value = parts
        kind = _KINDS.get(name)
        if kind is None:
            continue
        if kind == "lora":
            if math.isfinite(value) and (lora is None or value >= lora[0]):
                lora = (value, _adapters(labels))
            continue
        if not math.isfinite(value) or value < 0 or value > MAX_REQUESTS or (kind == "kv" and value > 1.0):
            raise BadMetrics(f"{name.decode('latin-1')[:60]} = {value!r}")
        if kind == "kv":
            kv[name] = max(kv.get(name, 0.0), value)
        else:
            sums[kind] += value
            seen.add(kind)
    if not seen:
        return None
    kv_use = next((kv[n] for n in KV if n in kv), 0.0)
    return EngineSample(sums["running"], sums["waiting"], kv_use, lora[1] if lora else frozenset())
